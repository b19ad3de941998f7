//! Link flags of the `mozart` binary.
//!
//! Every `mozart` command starts by relocating the binary's pointer tables (vtables, panic
//! locations, string tables: ~40,000 relative relocations). Packed as DT_RELR they take
//! 11 KB instead of 960 KB of RELA entries that the dynamic loader reads at each start; the
//! relocated pages and the binary's ASLR (it stays a PIE) are the same. This is set here
//! rather than in RUSTFLAGS so that only the `mozart` binary is linked with it (no crate is
//! rebuilt for it) and `cargo install` gets it too.
//!
//! A DT_RELR binary names the `GLIBC_ABI_DT_RELR` version, which only glibc ≥ 2.36 has:
//! the flag is passed only when the C library this build links against has it (an older
//! system gets the plain binary instead of one its loader refuses). `MOZART_NO_RELR=1`
//! links without it, e.g. to run the binary on an older system than the one building it.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=MOZART_NO_RELR");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let opted_out = std::env::var_os("MOZART_NO_RELR").is_some_and(|v| !v.is_empty() && v != "0");
    let native = var("HOST") == var("TARGET");
    if var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && native
        && !opted_out
        && glibc_has_dt_relr(&var("CARGO_CFG_TARGET_ARCH"))
    {
        println!("cargo:rustc-link-arg-bin=mozart=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this system's glibc defines the `GLIBC_ABI_DT_RELR` version (glibc ≥ 2.36).
fn glibc_has_dt_relr(arch: &str) -> bool {
    let multiarch = format!("/lib/{arch}-linux-gnu/libc.so.6");
    let usr_multiarch = format!("/usr/lib/{arch}-linux-gnu/libc.so.6");
    let candidates = [
        multiarch.as_str(),
        usr_multiarch.as_str(),
        "/lib64/libc.so.6",
        "/usr/lib64/libc.so.6",
        "/lib/libc.so.6",
    ];
    let Some(libc) = candidates.iter().map(Path::new).find(|p| p.exists()) else {
        return false;
    };
    let Ok(bytes) = std::fs::read(libc) else {
        return false;
    };
    let needle = b"GLIBC_ABI_DT_RELR";
    bytes.windows(needle.len()).any(|w| w == needle)
}
