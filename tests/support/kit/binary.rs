//! The example binaries the launchers run (the worker, `ctl`, `local_group`, `certs`):
//! found beside the running test or bench (`<target>/<profile>/examples/`), built with a
//! nested `cargo build --example NAME` when they are missing or stale.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::SystemTime;

/// `<target>/<profile>`: a test or bench runs from `<target>/<profile>/deps/`.
pub(crate) fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the running executable lies in <target>/<profile>/deps")
        .to_path_buf()
}

/// The Cargo target folder this runs from (it follows `CARGO_TARGET_DIR`, because cargo
/// put the running binary there).
pub(crate) fn target_dir() -> PathBuf {
    profile_dir()
        .parent()
        .expect("<target>/<profile> has a parent")
        .to_path_buf()
}

/// `cargo`, to run from a test or bench, in the package folder.
///
/// The test runs with the package's cargo variables set; some build scripts (ring's)
/// rerun when those change (CARGO_MANIFEST_DIR), so none of them is passed on, or the
/// nested build rebuilds half the dependency tree and the next plain build rebuilds it
/// back.
pub(crate) fn nested_cargo() -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    for (k, _) in std::env::vars_os() {
        let key = k.to_string_lossy().into_owned();
        if key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || key.starts_with("CARGO_BIN_")
            || key.starts_with("CARGO_CRATE_")
            || key == "CARGO_PRIMARY_PACKAGE"
            || key == "CARGO_TARGET_TMPDIR"
            || key == "OUT_DIR"
        {
            cmd.env_remove(&k);
        }
    }
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
    cmd
}

/// The arguments of `cargo build` for example `name` in this profile (with `--release`
/// under `cargo bench` or a release test run), then `more`.
pub(crate) fn build_args<'a>(name: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["build", "--example", name];
    // A test built with the mutations feature runs workers built with it too, so that
    // TENURE_MUTATION (inherited) breaks them as it breaks the nodes in this process.
    if cfg!(feature = "mutations") {
        args.extend_from_slice(&["--features", "mutations"]);
    }
    args.extend_from_slice(more);
    if profile_dir().file_name().is_some_and(|n| n == "release") {
        args.push("--release");
    }
    args
}

/// Builds example `name` in this profile (`cargo build --example NAME`, a no-op when it
/// is fresh) and returns its path. Panics when cargo fails.
pub(crate) fn build_example(name: &str) -> PathBuf {
    let args = build_args(name, &[]);
    let status = nested_cargo()
        .args(&args)
        .stdout(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("run cargo {}: {e}", args.join(" ")));
    assert!(status.success(), "cargo {} failed", args.join(" "));
    let bin = profile_dir().join("examples").join(name);
    assert!(bin.exists(), "{name} binary not found at {}", bin.display());
    bin
}

/// Example `name`'s binary, built once per process: used as it is when it is newer than
/// every source it is built from (a plain `cargo test` has just built the examples),
/// built with [`build_example`] otherwise (a filtered run such as `cargo test --test
/// settlement` builds no example).
pub(crate) fn example(name: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(bin) = built.get(name) {
        return bin.clone();
    }
    let bin = profile_dir().join("examples").join(name);
    // Under the mutations feature the binary there may lack it: cargo decides.
    let bin = if !cfg!(feature = "mutations") && bin.exists() && newer_than_sources(&bin) {
        bin
    } else {
        build_example(name)
    };
    built.insert(name.to_string(), bin.clone());
    bin
}

/// Whether `bin` is newer than Cargo.toml and every file under src/, examples/ and
/// tests/support/ (`local_group` includes this kit and the checker).
fn newer_than_sources(bin: &Path) -> bool {
    fn newest(dir: &Path, acc: &mut SystemTime) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                newest(&p, acc);
            } else if let Ok(m) = e.metadata().and_then(|m| m.modified()) {
                *acc = (*acc).max(m);
            }
        }
    }
    let Ok(built) = std::fs::metadata(bin).and_then(|m| m.modified()) else {
        return false;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut newest_src = std::fs::metadata(root.join("Cargo.toml"))
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    newest(&root.join("src"), &mut newest_src);
    newest(&root.join("examples"), &mut newest_src);
    newest(&root.join("tests").join("support"), &mut newest_src);
    built > newest_src
}

/// Runs `bin` with exactly `args`, stdin from `/dev/null`, and waits for it: (exit code,
/// stdout, stderr); the exit code is -1 when a signal ended it.
pub(crate) fn output(bin: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
