//! Link flags of the `mozart` binary.
//!
//! Every `mozart` command starts by relocating the binary's pointer tables (vtables, panic
//! locations, string tables: ~40,000 relative relocations). Packed as DT_RELR they take a
//! few kilobytes instead of 960 KB of RELA entries that the dynamic loader reads and walks
//! one by one at each start; the relocated pages and the binary's ASLR are the same. This is
//! set here rather than in RUSTFLAGS so that only the `mozart` binary is linked with it
//! (no crate is rebuilt for it) and `cargo install` gets it too.
//!
//! DT_RELR needs glibc ≥ 2.36 at run time (the binary then names the `GLIBC_ABI_DT_RELR`
//! version, so an older glibc refuses it with a clear loader error instead of misbehaving);
//! the linker is the toolchain's own rust-lld (rust-toolchain.toml), which supports it.
//! `MOZART_NO_RELR=1` at build time links without it, for older systems.

fn main() {
    println!("cargo:rerun-if-env-changed=MOZART_NO_RELR");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let opted_out = std::env::var_os("MOZART_NO_RELR").is_some_and(|v| !v.is_empty() && v != "0");
    if os == "linux" && env == "gnu" && !opted_out {
        println!("cargo:rustc-link-arg-bin=mozart=-Wl,-z,pack-relative-relocs");
    }
}
