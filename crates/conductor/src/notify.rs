//! systemd readiness notification (`sd_notify`) written by hand: one datagram to
//! `$NOTIFY_SOCKET`, no extra crate.

use std::os::unix::net::UnixDatagram;

/// Send `state` (e.g. `READY=1`) if `NOTIFY_SOCKET` is set; failures are logged, not fatal.
pub fn sd_notify(state: &str) {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let target = target.to_string_lossy().into_owned();
    if let Err(err) = send(&target, state) {
        tracing::warn!(error = %err, socket = %target, state, "daemon.sd_notify_failed");
    }
}

fn send(target: &str, state: &str) -> std::io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    if let Some(name) = target.strip_prefix('@') {
        // A leading '@' names an abstract-namespace socket (systemd's default for user units).
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        socket.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        socket.send_to(state.as_bytes(), target)?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn a_datagram_reaches_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let receiver = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        super::send(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
