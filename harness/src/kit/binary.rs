//! The programs the launchers run: the worker (`tenure-worker`, a binary of the crate)
//! and the examples (`ctl`, `local_group`, `certs`), found beside the running test, bench
//! or example (`<target>/<profile>/` and its `examples/`), built with a nested `cargo
//! build --bin NAME` or `--example NAME` when they are missing or stale.
//!
//! Not `CARGO_BIN_EXE_tenure-worker`: `scripts/rustc-wrapper.sh` runs under `/bin/sh`,
//! and dash drops variables whose names hold a `-` before it runs rustc. (It would name
//! the same file, `<profile>/tenure-worker`, which a later build of other features may
//! have replaced by the time the test runs.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::SystemTime;

/// `<target>/<profile>`: a test or bench runs from `<target>/<profile>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the running executable lies in <target>/<profile>/deps")
        .to_path_buf()
}

/// The Cargo target folder this runs from (it follows `CARGO_TARGET_DIR`, because cargo
/// put the running binary there).
pub fn target_dir() -> PathBuf {
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
pub fn nested_cargo() -> Command {
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
    cmd.current_dir(workspace());
    cmd
}

/// A program cargo builds: a binary of the crate or an example.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// `cargo build --bin NAME`, built to `<target>/<profile>/NAME`.
    Bin,
    /// `cargo build --example NAME`, built to `<target>/<profile>/examples/NAME`.
    Example,
}

impl Target {
    fn flag(self) -> &'static str {
        match self {
            Target::Bin => "--bin",
            Target::Example => "--example",
        }
    }

    /// Where cargo puts program `name` of this kind, in this profile.
    fn path(self, name: &str) -> PathBuf {
        match self {
            Target::Bin => profile_dir().join(name),
            Target::Example => profile_dir().join("examples").join(name),
        }
    }
}

/// The arguments of `cargo build` for program `name` of kind `target` in this profile
/// (with `--release` under `cargo bench` or a release test run), then `more`.
pub fn build_args<'a>(target: Target, name: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["build", target.flag(), name];
    // A test built with the mutations feature runs workers built with it too, so that
    // TENURE_MUTATION (inherited) breaks them as it breaks the nodes in this process.
    // Always with PostgreSQL, which the tests' own build of the worker has too (the
    // harness turns the feature on), so that a build here does not replace it with a
    // worker that refuses `--ledger postgres://`.
    if tenure::mutation::COMPILED {
        args.extend_from_slice(&["--features", "mutations,postgres"]);
    } else {
        args.extend_from_slice(&["--features", "postgres"]);
    }
    args.extend_from_slice(more);
    if profile_dir().file_name().is_some_and(|n| n == "release") {
        args.push("--release");
    }
    args
}

/// Builds program `name` of kind `target` in this profile (`cargo build --bin NAME` or
/// `--example NAME`, a no-op when it is fresh) and returns its path. Panics when cargo
/// fails.
pub fn build(target: Target, name: &str) -> PathBuf {
    try_build(target, name).unwrap_or_else(|e| panic!("{e}"))
}

/// [`build`], with an error naming what failed instead of a panic.
fn try_build(target: Target, name: &str) -> Result<PathBuf, String> {
    let args = build_args(target, name, &[]);
    let status = nested_cargo()
        .args(&args)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("run cargo {}: {e}", args.join(" ")))?;
    if !status.success() {
        return Err(format!("cargo {} failed", args.join(" ")));
    }
    let bin = target.path(name);
    if !bin.exists() {
        return Err(format!("{name} binary not found at {}", bin.display()));
    }
    Ok(bin)
}

/// The worker, `tenure-worker` (see [`program`]): cargo builds it for every integration
/// test and bench, not for an example such as `local_group`. Panics when its build fails.
pub fn worker() -> PathBuf {
    try_worker().unwrap_or_else(|e| panic!("{e}"))
}

/// [`worker`], with an error naming what failed instead of a panic.
pub fn try_worker() -> Result<PathBuf, String> {
    program(Target::Bin, "tenure-worker")
}

/// The operator tool, `tenure-ctl` (see [`program`]), built like the worker. Panics when
/// its build fails.
pub fn ctl() -> PathBuf {
    program(Target::Bin, "tenure-ctl").unwrap_or_else(|e| panic!("{e}"))
}

/// Example `name`'s binary (see [`program`]). Panics when its build fails.
pub fn example(name: &str) -> PathBuf {
    program(Target::Example, name).unwrap_or_else(|e| panic!("{e}"))
}

/// Program `name`'s binary, built once per process: used as it is when it is newer than
/// every source it is built from (a plain `cargo test` has just built the binaries and
/// examples), built with [`build`] otherwise (a filtered run such as `cargo test --test
/// settlement` builds no example), and always under the mutations feature, so that the
/// binary run is one built with it.
pub fn program(target: Target, name: &str) -> Result<PathBuf, String> {
    static BUILT: Mutex<BTreeMap<(Target, String), PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let key = (target, name.to_string());
    if let Some(bin) = built.get(&key) {
        return Ok(bin.clone());
    }
    let bin = target.path(name);
    // Under the mutations feature the binary there may lack it: cargo decides.
    let bin = if !tenure::mutation::COMPILED && bin.exists() && newer_than_sources(&bin) {
        bin
    } else {
        try_build(target, name)?
    };
    built.insert(key, bin.clone());
    Ok(bin)
}

/// Whether `bin` is newer than Cargo.toml and every file under src/, examples/ and
/// harness/ (`local_group` uses this kit and the checker).
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
    let root = workspace();
    let mut newest_src = std::fs::metadata(root.join("Cargo.toml"))
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    newest(&root.join("src"), &mut newest_src);
    newest(&root.join("examples"), &mut newest_src);
    newest(&root.join("harness"), &mut newest_src);
    built > newest_src
}

/// The workspace's folder (tenure's own, the harness's parent): where cargo is run and
/// the sources are.
pub fn workspace() -> &'static Path {
    let harness = Path::new(env!("CARGO_MANIFEST_DIR"));
    harness.parent().unwrap_or(harness)
}

/// Runs `bin` with exactly `args`, stdin from `/dev/null`, and waits for it: (exit code,
/// stdout, stderr); the exit code is -1 when a signal ended it.
pub fn output(bin: &Path, args: &[&str]) -> (i32, String, String) {
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
