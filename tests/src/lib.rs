//! Shared helpers for black-box tests.
