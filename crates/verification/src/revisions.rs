//! Directory revisions model (see below).
