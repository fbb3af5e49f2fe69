//! Measures a real worker process under the resource attacks of issue 1/6 (finding 4):
//! its RSS while a peer holding a valid node certificate sends frames of empty
//! `entries` or stalls half-sent frames, and its file descriptors and CPU while idle TCP
//! connections sit on its metrics endpoint. It prints numbers; it asserts only that the
//! harness itself worked. Not part of `cargo test` (ignored: it takes about a minute and
//! sends hundreds of megabytes over loopback):
//!
//! ```text
//! cargo test --test transport limits_measure:: -- --ignored --nocapture
//! ```
//!
//! The worker is node 1 of a group of three; the test process is "node 2" (it holds node
//! 2's files, as a stolen or misused certificate would); node 3 is never started. The
//! worker's file-descriptor limit is set to 1024, a common default. Streams begin with a
//! hello (`transport::hello`), as a node's do (the numbers before the limits were taken
//! before the hello existed).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use tenure::transport::tls::{node_server_name, write_cluster_certs, TlsIdentity};
use tenure::transport::Hello;
use tenure_harness::kit::command::WorkerCommand;

fn free_udp() -> SocketAddr {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The field of `key` (in kB) in /proc/PID/status.
fn status_kb(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn rss_mb(pid: u32) -> f64 {
    status_kb(pid, "VmRSS:") as f64 / 1024.0
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, std::iter::Iterator::count)
}

/// User + system CPU time of `pid` in clock ticks (usually 1/100 s).
fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12) // utime, stime (fields 14 and 15 of the whole line)
}

struct Worker {
    child: Child,
    metrics: String,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_worker(dir: &std::path::Path, addrs: &[SocketAddr; 3]) -> Worker {
    let mut cmd = WorkerCommand::new(tenure_harness::procs::worker_binary())
        .id(1)
        .listen(addrs[0])
        .peers([(1, addrs[0]), (2, addrs[1]), (3, addrs[2])])
        .data_dir(dir.join("w1"))
        .certs(dir.join("certs"))
        .metrics("127.0.0.1:0")
        .log_level("off")
        // Founding waits for the other first members, who never come: the transport runs
        // all the same, and it is what is measured.
        .found("7e4a11c0ffee00000000000000000001")
        .command();
    cmd.stdout(Stdio::piped()).stderr(Stdio::null());
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1024,
                rlim_max: 1024,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn worker");
    let out = child.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let metrics = loop {
        let line = lines.next().expect("worker exited").unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        if v["event"] == "started" {
            break v["metrics"].as_str().unwrap().to_string();
        }
        assert_ne!(v["event"], "start_failed", "{line}");
    };
    std::thread::spawn(move || for _ in lines {});
    Worker { child, metrics }
}

/// Samples the RSS of `pid` every 20 ms for `d` and returns the largest.
async fn peak_rss_for(pid: u32, d: Duration) -> f64 {
    let end = Instant::now() + d;
    let mut peak: f64 = 0.0;
    while Instant::now() < end {
        peak = peak.max(rss_mb(pid));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    peak
}

/// A frame whose payload is `len` bytes of empty `entries` (field 7, length 0: 2 bytes
/// each); only the first `send` bytes of the frame are produced.
fn empty_entries_frame(len: usize, send: usize) -> Vec<u8> {
    let mut f = (len as u32).to_be_bytes().to_vec();
    f.reserve(send);
    while f.len() < send.min(4 + len) {
        f.extend_from_slice(&[0x3a, 0x00]);
    }
    f.truncate(send.min(4 + len));
    f
}

async fn connect(ep: &quinn::Endpoint, id: &TlsIdentity, to: SocketAddr) -> quinn::Connection {
    ep.connect_with(id.client_config().unwrap(), to, &node_server_name(1))
        .unwrap()
        .await
        .unwrap()
}

fn scrape(addr: &str, timeout: Duration) -> Result<usize, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(timeout)).unwrap();
    s.set_write_timeout(Some(timeout)).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("write: {e}"))?;
    let mut body = Vec::new();
    s.read_to_end(&mut body).map_err(|e| format!("read: {e}"))?;
    if body.starts_with(b"HTTP/1.1 200") {
        Ok(body.len())
    } else {
        Err(format!(
            "answer: {:?}",
            String::from_utf8_lossy(&body[..body.len().min(40)])
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, prints numbers: cargo test --test transport limits_measure:: -- --ignored --nocapture"]
async fn measure_worker_under_resource_attacks() {
    let dir = tempfile::tempdir().unwrap();
    write_cluster_certs(dir.path().join("certs"), 1..=3).unwrap();
    let addrs = [free_udp(), free_udp(), free_udp()];
    let w = start_worker(dir.path(), &addrs);
    let pid = w.child.id();
    let node1 = addrs[0];
    let id2 = TlsIdentity::from_dir(dir.path().join("certs"), 2).unwrap();
    let ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();

    tokio::time::sleep(Duration::from_secs(2)).await;
    println!("baseline: RSS {:.1} MB, {} fds", rss_mb(pid), fds(pid));

    // 1. Frames of empty entries, at the old limit (16 MiB) and the new one (4 MiB).
    for (mib, conns, per_conn) in [(16usize, 1usize, 1usize), (16, 2, 2), (4, 1, 1), (4, 2, 2)] {
        let len = mib * 1024 * 1024 - 4;
        let frame = empty_entries_frame(len, 4 + len);
        let before = rss_mb(pid);
        let mut held = Vec::new();
        for _ in 0..conns {
            let c = connect(&ep, &id2, node1).await;
            for _ in 0..per_conn {
                let mut s = c.open_uni().await.unwrap();
                let f = frame.clone();
                held.push(tokio::spawn(async move {
                    let _ = s.write_all(&Hello::default().encode()).await;
                    let _ = s.write_all(&f).await;
                    let _ = s.finish();
                    std::future::pending::<()>().await;
                    drop(s);
                }));
            }
            held.push(tokio::spawn(async move {
                let e = c.closed().await;
                println!("    connection ended: {e}");
            }));
        }
        let peak = peak_rss_for(pid, Duration::from_secs(4)).await;
        println!(
            "empty-entries frames: {} x {mib} MiB over {conns} connection(s): RSS {before:.1} -> peak {peak:.1} MB, now {:.1} MB",
            conns * per_conn,
            rss_mb(pid)
        );
        for h in held {
            h.abort();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // 2. Stalled half frames: 4 connections x 8 streams, each half of a max frame.
    for mib in [16usize, 4] {
        let len = mib * 1024 * 1024 - 4;
        let half = empty_entries_frame(len, 4 + len / 2);
        let before = rss_mb(pid);
        let mut conns = Vec::new();
        let mut streams = Vec::new();
        for _ in 0..4 {
            let c = connect(&ep, &id2, node1).await;
            for _ in 0..8 {
                match c.open_uni().await {
                    Ok(mut s) => {
                        let h = half.clone();
                        streams.push(tokio::spawn(async move {
                            let _ = s.write_all(&Hello::default().encode()).await;
                            let _ = s.write_all(&h).await;
                            // Never finish: hold the stream open.
                            std::future::pending::<()>().await;
                            drop(s);
                        }));
                    }
                    Err(e) => println!("    open_uni: {e}"),
                }
            }
            conns.push(c);
        }
        let peak = peak_rss_for(pid, Duration::from_secs(12)).await;
        let alive = conns.iter().filter(|c| c.close_reason().is_none()).count();
        println!(
            "stalled half frames of {mib} MiB, 4 x 8: RSS {before:.1} -> peak {peak:.1} MB, {:.1} MB after 12 s; connections still open: {alive} of 4",
            rss_mb(pid)
        );
        for s in streams {
            s.abort();
        }
        for c in conns {
            c.close(0u32.into(), b"done");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // 3. 1,100 idle TCP connections on the metrics endpoint.
    let fd_before = fds(pid);
    let cpu0 = cpu_ticks(pid);
    let mut idle = Vec::new();
    let mut connect_errors = 0;
    for _ in 0..1100 {
        match TcpStream::connect(&w.metrics) {
            Ok(s) => idle.push(s),
            Err(_) => connect_errors += 1,
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let fd_held = fds(pid);
    let cpu1 = cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu2 = cpu_ticks(pid);
    let served = tokio::task::spawn_blocking({
        let a = w.metrics.clone();
        move || scrape(&a, Duration::from_secs(3))
    })
    .await
    .unwrap();
    println!(
        "metrics endpoint, 1100 idle connections ({connect_errors} connect errors): fds {fd_before} -> {fd_held}; \
         worker CPU over the next 2 s: {} % of a core; a scrape meanwhile: {served:?}",
        (cpu2 - cpu1) as f64 / 2.0
    );
    let _ = cpu0;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let mut still = 0;
    for s in &mut idle {
        s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        if !matches!(s.read(&mut b), Ok(0)) {
            still += 1;
        }
    }
    println!(
        "  10 s later: worker fds {}, idle connections the worker has not closed: {still} of {}",
        fds(pid),
        idle.len()
    );
    drop(idle);
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!("  after the client closed them: worker fds {}", fds(pid));
}
