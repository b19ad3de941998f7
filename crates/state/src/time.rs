//! Wall-clock helpers, owned by the protocol crate since checkpoint timestamps cross the
//! socket as they are stored (re-exported so storage code keeps its `time` paths).

pub use mozart_ipc::time::{epoch_now, parse_iso8601, Timestamp};
