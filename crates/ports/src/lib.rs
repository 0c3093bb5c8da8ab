//! Port traits (storage, remote, metrics) with in-memory fakes and conformance suites behind the testing feature.
