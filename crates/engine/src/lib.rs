//! Async use cases over the ports: lifecycle worker, command intake, scoped writes, directory projector.
