//! Lifecycle saga dispatcher, worker loop and command intake.
