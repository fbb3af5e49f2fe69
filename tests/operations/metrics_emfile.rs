//! The metrics endpoint's accept loop when the process is out of file descriptors
//! (`EMFILE`): it pauses (backing off up to a second) and logs, instead of spinning a
//! core without a word, and serves again once descriptors are free. It lowers the process's
//! descriptor limit, so it runs in a child process of its own (the harness's `alone`):
//! the other tests of this binary run beside it.

use tenure_harness::alone::{rerun, test_name};
use tenure_harness::shared_log;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use shared_log::SharedLog;
use tenure::metrics::{serve_with, ServeOptions};

const TIMEOUT: Duration = Duration::from_secs(20);

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

/// Set in the child process that runs the test.
const CHILD_VAR: &str = "TENURE_EMFILE_CHILD";

#[test]
fn accept_errors_pause_the_loop_and_are_logged_once() {
    if std::env::var_os(CHILD_VAR).is_some() {
        return tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(out_of_descriptors());
    }
    let name = test_name(
        module_path!(),
        "accept_errors_pause_the_loop_and_are_logged_once",
    );
    let out = rerun(&name)
        .env(CHILD_VAR, "1")
        .output()
        .expect("run the test in a child");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the child failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

/// The test itself, in the child.
async fn out_of_descriptors() {
    let log = SharedLog::default();
    let logger = log.logger();
    let server = serve_with(
        "127.0.0.1:0".parse().unwrap(),
        || "ok\n".to_string(),
        ServeOptions {
            logger,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let addr = server.local_addr();

    // Leave 8 descriptors free, then take them with client sockets: the connections the
    // kernel completes next cannot be accepted.
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a valid struct.
    unsafe { assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut old), 0) };
    let low = libc::rlimit {
        rlim_cur: open_fds() + 8,
        rlim_max: old.rlim_max,
    };
    unsafe { assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &low), 0) };
    let mut clients = Vec::new();
    while let Ok(s) = TcpStream::connect(addr) {
        clients.push(s);
        assert!(clients.len() < 100, "the limit did not take");
    }
    let start = Instant::now();
    while server.stats().accept_errors == 0 {
        assert!(
            start.elapsed() < TIMEOUT,
            "no accept error: {:?}",
            server.stats()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // For a second and a half of EMFILE, a spinning loop fails its accept hundreds of
    // thousands of times; this one pauses 10 ms, 20 ms, ... up to 1 s in between.
    let errors_then = server.stats().accept_errors;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let errors = server.stats().accept_errors - errors_then;
    assert!(
        errors <= 20,
        "{errors} accept errors in 1.5 s: the loop spins"
    );
    let text = log.text();
    let warns = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("accept failed"))
        .count();
    assert_eq!(warns, 1, "{text}");
    assert!(
        text.contains("Too many open files") || text.contains("os error 24"),
        "{text}"
    );

    // Descriptors free again: it serves.
    drop(clients);
    unsafe { assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &old), 0) };
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer:?}");
    server.abort();
}
