//! Ours: the checkpointed state of a sheet's worker + reviewer loop (docs/mochi.md). The
//! types are the wire's (`mozart-ipc`), shared with the storage model like the other leaf
//! types of the checkpoint.

pub use mozart_ipc::checkpoint::{ReviewState, ReviewVerdict};
