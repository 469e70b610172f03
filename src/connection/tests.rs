//! The connection's socket-level behaviour, against a listener of the test's own.

use super::*;
use std::net::TcpListener;

fn pair() -> (Connection, std::net::TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = Address::Tcp {
        host: "127.0.0.1".into(),
        port: listener.local_addr().unwrap().port(),
    };
    let c = Connection::connect(&addr, &SocketOptions::for_tests()).unwrap();
    (c, listener.accept().unwrap().0)
}

#[test]
fn the_read_buffer_grows_to_the_announced_unit_and_no_further() {
    let (mut c, mut server) = pair();
    server.write_all(b"VALUE k 0 200000\r\n").unwrap();
    while c.unread().len() < 18 {
        c.recv_blocking().unwrap();
    }
    c.consume(5);
    // A unit of 200,000 bytes that starts at the first unread byte: exactly that much room.
    c.reserve_unit(200_000).unwrap();
    assert_eq!(c.rbuf.len(), 200_000);
    assert_eq!(c.unread(), b" k 0 200000\r\n");
    // Already room: nothing moves.
    c.reserve_unit(1000).unwrap();
    assert_eq!(c.rbuf.len(), 200_000);
    let block = vec![b'x'; 200_000 - 13];
    server.write_all(&block).unwrap();
    while c.unread().len() < 200_000 {
        c.recv_blocking().unwrap();
    }
    assert_eq!(c.rbuf.len(), 200_000);
    // Too large for the allocator: an error, not an abort.
    let r = c.reserve_unit(usize::MAX / 2);
    assert!(matches!(r, Err(Error::Alloc(_))), "{r:?}");
}

fn nodelay(c: &Connection) -> bool {
    match &c.stream {
        Stream::Tcp(s) => s.nodelay().unwrap(),
        Stream::Unix(_) | Stream::Fake(_) => unreachable!(),
    }
}

#[test]
fn a_run_of_noreply_writes_has_nagle_on_until_the_next_request() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let ms = Duration::from_millis;
    let opts = SocketOptions::for_tests();
    let addr = Address::Tcp {
        host: "127.0.0.1".into(),
        port,
    };
    let mut c = Connection::connect(&addr, &opts).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    assert!(nodelay(&c));
    // The first noreply write of a run goes out at once.
    assert_eq!(c.send_noreply(b"delete a noreply\r\n").unwrap(), 18);
    c.sent_noreply(1, crate::clock::Tick::now());
    assert!(nodelay(&c));
    // The next ones may be gathered.
    assert_eq!(c.send_noreply(b"delete b noreply\r\n").unwrap(), 18);
    c.sent_noreply(1, crate::clock::Tick::now());
    assert!(!nodelay(&c));
    assert_eq!(c.send_noreply(b"delete c noreply\r\n").unwrap(), 18);
    assert!(!nodelay(&c));
    // A request that waits for an answer turns TCP_NODELAY back on, which pushes them all.
    assert_eq!(c.send_nonblocking(b"mn\r\n").unwrap(), 4);
    assert!(nodelay(&c));
    let want = b"delete a noreply\r\ndelete b noreply\r\ndelete c noreply\r\nmn\r\n";
    let mut got = vec![0; want.len()];
    server.set_read_timeout(Some(ms(4000))).unwrap();
    server.read_exact(&mut got).unwrap();
    assert_eq!(&got[..], &want[..]);
}

#[test]
fn for_a_medium_unit_the_read_buffer_at_least_doubles() {
    let (mut c, _server) = pair();
    c.reserve_unit(READ_CHUNK + 1).unwrap();
    assert_eq!(c.rbuf.len(), 2 * READ_CHUNK);
    c.reserve_unit(2 * READ_CHUNK + 1).unwrap();
    assert_eq!(c.rbuf.len(), 4 * READ_CHUNK);
    // Past KEEP_READ_BUF: exactly the unit.
    c.reserve_unit(KEEP_READ_BUF + 1).unwrap();
    assert_eq!(c.rbuf.len(), KEEP_READ_BUF + 1);
    c.shrink();
    assert_eq!(c.rbuf.len(), READ_CHUNK);
}

#[test]
fn a_read_buffer_grown_past_keep_read_buf_is_handed_over_with_a_value_in_it() {
    let (mut c, mut server) = pair();
    let n = KEEP_READ_BUF + 10;
    server.write_all(b"0123456789").unwrap();
    while c.unread().len() < 10 {
        c.recv_blocking().unwrap();
    }
    // Not grown: nothing is handed over.
    let at = c.unread().as_ptr() as usize;
    assert_eq!(c.take_read_buffer(at, 10), None);
    c.reserve_unit(n).unwrap();
    assert!(c.holds_large_unit());
    let mut block = vec![b'v'; n - 10];
    block.extend_from_slice(b"END\r\n");
    server.write_all(&block).unwrap();
    while c.unread().len() < n + 5 {
        c.recv_blocking().unwrap();
    }
    let at = c.unread()[10..].as_ptr() as usize;
    c.consume(n);
    // Bytes that are not in the buffer: refused.
    assert_eq!(c.take_read_buffer(block.as_ptr() as usize, 1), None);
    let (buf, start) = c.take_read_buffer(at, n - 10).unwrap();
    assert_eq!(start, 10);
    assert_eq!(&buf[..10], b"0123456789");
    assert!(buf[start..n].iter().all(|&b| b == b'v'));
    // The connection keeps what was not consumed, in a buffer of the usual size.
    assert_eq!(c.unread(), b"END\r\n");
    assert_eq!(c.rbuf.len(), READ_CHUNK);
    assert!(!c.holds_large_unit());
}
