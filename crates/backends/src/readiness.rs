//! Whether an HTTP instrument could run from here, checked without sending it a request:
//! what `mozart doctor` reports for `anthropic_api`, `ollama` and user HTTP profiles.

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::error::BackendError;
use crate::profile::InstrumentProfile;
use crate::registry::InstrumentRegistry;

/// What [`http_readiness`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpReadiness {
    /// This build has no client for the profile's API.
    Unsupported(String),
    /// The profile's key variable is unset or empty.
    MissingKey(String),
    /// A local server was expected at this URL and nothing answered (with the error).
    NoServer(String, String),
    /// A local server accepted a connection at this URL.
    ServerAnswers(String),
    /// A remote API with its key set; the API itself was not contacted.
    NotContacted(String),
}

impl HttpReadiness {
    /// Whether a sheet on this instrument could start.
    pub fn is_ready(&self) -> bool {
        matches!(self, Self::ServerAnswers(_) | Self::NotContacted(_))
    }

    /// One line for a person.
    pub fn describe(&self) -> String {
        match self {
            Self::Unsupported(reason) => format!("not supported: {reason}"),
            Self::MissingKey(var) => format!("{var} is not set"),
            Self::NoServer(url, err) => format!("no server at {url} ({err})"),
            Self::ServerAnswers(url) => format!("server answers at {url}"),
            Self::NotContacted(url) => format!("key set; {url} not contacted"),
        }
    }
}

/// Check an `http` profile: a client exists for its API, its key variable is set in this
/// environment, and a server on this machine (a loopback base URL) accepts a connection
/// within `timeout`. A remote API is not contacted.
pub fn http_readiness(
    registry: &InstrumentRegistry,
    profile: &InstrumentProfile,
    timeout: Duration,
) -> HttpReadiness {
    http_readiness_in(registry, profile, timeout, |var| {
        std::env::var_os(var).is_some_and(|v| !v.is_empty())
    })
}

/// [`http_readiness`] with `is_set` saying whether a variable is set (not empty) in the
/// environment the instrument runs in (e.g. the running conductor's).
pub fn http_readiness_in(
    registry: &InstrumentRegistry,
    profile: &InstrumentProfile,
    timeout: Duration,
    is_set: impl Fn(&str) -> bool,
) -> HttpReadiness {
    match registry.backend(&profile.name) {
        Err(BackendError::Unsupported { reason, .. }) => return HttpReadiness::Unsupported(reason),
        Err(other) => return HttpReadiness::Unsupported(other.to_string()),
        Ok(_) => {}
    }
    let Some(http) = &profile.http else {
        return HttpReadiness::Unsupported("no 'http' section".into());
    };
    if let Some(var) = http.auth_env_var.as_deref().filter(|v| !v.is_empty()) {
        if !is_set(var) {
            return HttpReadiness::MissingKey(var.to_string());
        }
    }
    let base = http.base_url.clone();
    let Ok(url) = reqwest::Url::parse(&base) else {
        return HttpReadiness::NoServer(base, "not a URL".into());
    };
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return HttpReadiness::NoServer(base, "no host in the URL".into());
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return HttpReadiness::NotContacted(base);
    }
    let addrs: Vec<_> = match (host, port).to_socket_addrs() {
        Ok(addrs) => addrs.collect(),
        Err(e) => return HttpReadiness::NoServer(base, e.to_string()),
    };
    let mut last = String::from("no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(_) => return HttpReadiness::ServerAnswers(base),
            Err(e) => last = e.to_string(),
        }
    }
    HttpReadiness::NoServer(base, last)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn readiness(name: &str) -> HttpReadiness {
        let registry = InstrumentRegistry::builtin().unwrap();
        let profile = registry.get(name).unwrap().clone();
        http_readiness(&registry, &profile, Duration::from_millis(300))
    }

    #[test]
    fn an_api_this_build_cannot_call_is_not_ready() {
        let r = readiness("recursive_light");
        assert!(matches!(r, HttpReadiness::Unsupported(_)), "{r:?}");
        assert!(!r.is_ready());
    }

    #[test]
    fn a_local_server_is_probed() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut registry = InstrumentRegistry::builtin().unwrap();
        let mut profile = (**registry.get("ollama").unwrap()).clone();
        profile.name = "probe-test".into();
        if let Some(http) = profile.http.as_mut() {
            http.base_url = format!("http://127.0.0.1:{port}");
        }
        registry.register(profile.clone(), crate::ProfileSource::BuiltIn);
        let up = http_readiness(&registry, &profile, Duration::from_secs(1));
        assert_eq!(
            up,
            HttpReadiness::ServerAnswers(format!("http://127.0.0.1:{port}"))
        );
        drop(listener);
        // A process another test spawns at this moment holds a copy of the listening socket
        // until its `exec` closes it (close-on-exec): the port may answer for that instant.
        let mut down = http_readiness(&registry, &profile, Duration::from_secs(1));
        for _ in 0..50 {
            if matches!(down, HttpReadiness::NoServer(..)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
            down = http_readiness(&registry, &profile, Duration::from_secs(1));
        }
        assert!(matches!(down, HttpReadiness::NoServer(..)), "{down:?}");
    }
}
