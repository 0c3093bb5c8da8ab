//! Pure lifecycle saga rules: control-space state machine, outbox commands, saga decisions, retry policy.
