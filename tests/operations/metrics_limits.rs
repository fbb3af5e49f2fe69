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
        for s in &mut idle {
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

/// Reads what the server sends until it closes (or resets) the connection.
fn read_until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return out,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_answers_half_closed_clients_and_closes_long_heads_and_slow_readers() {
    // More than the kernel buffers of a loopback connection hold: a client that does
    // not read keeps the answer from being written.
    let body = "x".repeat(32 << 20);
    let len = body.len();
    let response_timeout = Duration::from_secs(2);
    let server = serve_with(
        "127.0.0.1:0".parse().unwrap(),
        move || body.clone(),
        ServeOptions {
            response_timeout,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let addr = server.local_addr();
    let connect = move || {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s
    };

    // A client that shuts its sending side once the request is out gets the whole answer.
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = connect();
        write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        read_until_closed(&mut s)
    })
    .await
    .unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200 OK"),
        "{:?}",
        &answer[..answer.len().min(200)]
    );
    assert!(answer.len() > len, "{} bytes of {len}", answer.len());
    assert_eq!(server.stats().answered, 1, "{:?}", server.stats());

    // A request head over 4 KiB is not served: the connection is closed and counted.
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = connect();
        let long = "a".repeat(5000);
        let _ = write!(s, "GET /metrics HTTP/1.1\r\nX-Long: {long}\r\n\r\n");
        read_until_closed(&mut s)
    })
    .await
    .unwrap();
    assert!(
        !answer.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer[..answer.len().min(200)])
    );
    let start = Instant::now();
    while server.stats().timed_out != 1 {
        assert!(start.elapsed() < TIMEOUT, "{:?}", server.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // A client that asks and does not read is closed once the response timeout is up.
    let mut slow = connect();
    write!(slow, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    tokio::time::sleep(response_timeout + Duration::from_secs(1)).await;
    let got = tokio::task::spawn_blocking(move || read_until_closed(&mut slow))
        .await
        .unwrap();
    assert!(got.len() < len, "a slow reader got all {} bytes", got.len());
    let st = server.stats();
    assert_eq!((st.answered, st.timed_out), (1, 1), "{st:?}");
    let start = Instant::now();
    while server.stats().open != 0 {
        assert!(start.elapsed() < TIMEOUT, "{:?}", server.stats());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.abort();
}
