//! A test that needs a process of its own (it is killed, or it changes what the whole
//! process shares, such as its descriptor limit) runs in a child: the same test binary,
//! re-executed to run only that test.
//!
//! The tests are grouped into a few topic binaries whose tests run side by side in one
//! process; such a test would disturb the others, so it re-runs itself with a variable
//! set that tells the child it is the one to do the work.

use std::process::Command;

/// The name libtest gives test `f` of the module `module` (its `module_path!()`): the
/// module path without the binary's own name, then `f`.
pub fn test_name(module: &str, f: &str) -> String {
    match module.split_once("::") {
        Some((_, inside)) => format!("{inside}::{f}"),
        None => f.to_string(),
    }
}

/// A command that runs only test `name` (see [`test_name`]) of the running test binary,
/// on one thread, its output not captured.
pub fn rerun(name: &str) -> Command {
    let exe = std::env::current_exe().expect("the running test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    cmd
}
