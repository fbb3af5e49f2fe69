//! `scripts/bootstrap.sh` decides whether libclang (for RocksDB's bindgen step) must be
//! installed. It must look for what bindgen's clang-sys loads, `libclang.so*`, and not
//! take `libclang-cpp.so.*` (a different library, present on machines with LLVM's runtime
//! libraries only) for it: that mistake stopped a fresh machine's first build.
//!
//! Each test runs the script against a fake root folder with `TENURE_BOOTSTRAP_DRY_RUN`
//! (nothing is installed) and reads what it says it would do.

use std::path::Path;
use std::process::Command;

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bootstrap.sh")
}

/// Runs the bootstrap against `root`; returns (success, stderr).
fn run(root: &Path, extra: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new("bash");
    cmd.arg(script())
        .env("TENURE_BOOTSTRAP_ROOT", root)
        .env("TENURE_BOOTSTRAP_DRY_RUN", "1")
        .env_remove("LIBCLANG_PATH")
        .env_remove("TENURE_NO_BOOTSTRAP");
    for (k, v) in extra {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run bash scripts/bootstrap.sh");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn touch(root: &Path, rel: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, b"").unwrap();
}

#[test]
fn libclang_cpp_alone_is_not_libclang() {
    let root = tempfile::tempdir().unwrap();
    // What Debian's LLVM 14 runtime packages leave: the C++ library, not the C API one.
    touch(root.path(), "usr/lib/llvm-14/lib/libclang-cpp.so.14");
    touch(root.path(), "usr/lib/x86_64-linux-gnu/libclang-cpp.so.14");
    let (_, err) = run(root.path(), &[]);
    assert!(
        err.contains("would run:") && err.contains("libclang-dev"),
        "libclang-cpp must not count as libclang; the script said:\n{err}"
    );
    assert!(
        err.contains("bindgen"),
        "the script should say why it installs: {err}"
    );
}

#[test]
fn each_name_clang_sys_loads_counts_as_libclang() {
    for name in [
        "usr/lib/llvm-14/lib/libclang.so",
        "usr/lib/llvm-14/lib/libclang.so.1",
        "usr/lib/llvm-14/lib/libclang-14.so.1",
        "usr/lib/x86_64-linux-gnu/libclang-14.so",
        "usr/local/lib/libclang.so.18",
    ] {
        let root = tempfile::tempdir().unwrap();
        touch(root.path(), "usr/lib/llvm-14/lib/libclang-cpp.so.14");
        touch(root.path(), name);
        let (ok, err) = run(root.path(), &[]);
        assert!(
            ok && !err.contains("libclang-dev"),
            "{name} is a libclang bindgen loads; the script said:\n{err}"
        );
    }
}

#[test]
fn libclang_path_is_searched_alone() {
    let root = tempfile::tempdir().unwrap();
    touch(root.path(), "usr/lib/llvm-14/lib/libclang.so.1");
    let elsewhere = tempfile::tempdir().unwrap();
    touch(elsewhere.path(), "libclang-cpp.so.14");
    // clang-sys searches only LIBCLANG_PATH when it is set: so does the script.
    let (_, err) = run(
        root.path(),
        &[("LIBCLANG_PATH", elsewhere.path().to_str().unwrap())],
    );
    assert!(err.contains("libclang-dev"), "{err}");
    touch(elsewhere.path(), "libclang.so.1");
    let (ok, err) = run(
        root.path(),
        &[("LIBCLANG_PATH", elsewhere.path().to_str().unwrap())],
    );
    assert!(ok && !err.contains("libclang-dev"), "{err}");
}

#[test]
fn opting_out_reports_and_installs_nothing() {
    let root = tempfile::tempdir().unwrap();
    touch(root.path(), "usr/lib/llvm-14/lib/libclang-cpp.so.14");
    let (ok, err) = run(root.path(), &[("TENURE_NO_BOOTSTRAP", "1")]);
    assert!(!ok, "a missing package is an error when opting out: {err}");
    assert!(
        err.contains("not installing") && !err.contains("would run"),
        "{err}"
    );
}
