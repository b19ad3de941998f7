//! Ours: the checkpointed state of a sheet's worker + reviewer loop (docs/mochi.md). The
//! types are the wire's (`mozart_ipc::checkpoint`): the checkpoint stores what status shows.

pub use mozart_ipc::checkpoint::{ReviewProgress as ReviewState, ReviewVerdict};
