//! The metrics endpoint is unauthenticated: whoever reaches its port must not be able to
//! keep scrapes out or pin the worker's file descriptors (issue 1/6, finding 4).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tenure::metrics::{serve_with, ServeOptions};

const TIMEOUT: Duration = Duration::from_secs(20);

fn scrape(addr: std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// Whether the server has closed `s` (a read sees the end, or the connection reset).
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_keeps_serving_while_idle_connections_pile_up_and_closes_them() {
    let max = 8;
    let server = serve_with(
        "127.0.0.1:0".parse().unwrap(),
        || "tenure_term{node=\"1\"} 7\n".to_string(),
        ServeOptions {
            max_connections: max,
            request_timeout: Duration::from_secs(2),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let addr = server.local_addr();
    // 100 clients connect and say nothing.
    let idle_count = 100;
    let mut idle: Vec<TcpStream> = (0..idle_count)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let start = Instant::now();
    while server.stats().accepted < idle_count {
        assert!(start.elapsed() < TIMEOUT, "{:?}", server.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let st = server.stats();
    assert!(
        st.open <= max as u64 + 1,
        "{} connections held open with a cap of {max}: {st:?}",
        st.open
    );
    // A scrape gets through meanwhile.
    let answer = tokio::task::spawn_blocking(move || scrape(addr))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with("tenure_term{node=\"1\"} 7\n"), "{answer}");
    // Every idle connection is closed by the server: evicted for newer ones, or timed
    // out waiting for its request.
    let start = Instant::now();
    loop {
        let mut open = 0;
        for s in idle.iter_mut() {
            if !closed_by_server(s) {
                open += 1;
            }
        }
        if open == 0 {
            break;
        }
        assert!(
            start.elapsed() < TIMEOUT,
            "{open} idle connections still open: {:?}",
            server.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let st = server.stats();
    assert_eq!(st.evicted + st.timed_out, idle_count, "{st:?}");
    assert!(st.evicted >= idle_count - max as u64, "{st:?}");
    assert_eq!(st.answered, 1, "{st:?}");
    let start = Instant::now();
    while server.stats().open != 0 {
        assert!(start.elapsed() < TIMEOUT, "{:?}", server.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.abort();
}
