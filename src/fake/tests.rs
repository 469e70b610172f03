//! The fake's brain on a few scripts (its exactness against memcached is proven from Python by
//! tests/api/test_fake_diff.py, which runs through this code), and the in-process wire.

use std::sync::Arc;
use std::time::Duration;

use super::wire::Wire;
use super::*;

fn fake() -> Arc<Fake> {
    Arc::new(Fake::new(
        Arc::new(Clock::new(None, true)),
        1024 * 1024,
        b"1.6.45",
    ))
}

fn run(f: &Fake, s: &mut Session, input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    f.handle(s, input, &mut out);
    out
}

#[test]
fn text_commands_and_expiry_on_the_clock() {
    let f = fake();
    let mut s = Session::new();
    let out = run(&f, &mut s, b"set a 5 10 2\r\nhi\r\nget a b\r\nincr a 1\r\n");
    assert_eq!(
        out,
        b"STORED\r\nVALUE a 5 2\r\nhi\r\nEND\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    );
    f.store().t.clock.advance(10.0);
    assert_eq!(run(&f, &mut s, b"get a\r\n"), b"END\r\n");
    // a partial command waits for the rest
    assert_eq!(run(&f, &mut s, b"set n 0 0 3\r\n10"), b"");
    assert_eq!(
        run(&f, &mut s, b"0\r\ndecr n 95\r\nget n\r\n"),
        b"STORED\r\n5\r\nVALUE n 0 3\r\n5  \r\nEND\r\n"
    );
}

#[test]
fn meta_lease_and_binary_version() {
    let f = fake();
    let mut s = Session::new();
    let out = run(&f, &mut s, b"mg l v c N30 O1\r\nmg l v q\r\nmn\r\n");
    assert_eq!(out, b"VA 0 c1 O1 W\r\n\r\nVA 0 Z\r\n\r\nMN\r\n");
    let mut b = Session::new();
    let mut req = vec![0x80, 0x0B, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
    req.extend_from_slice(&[0; 8]);
    let out = run(&f, &mut b, &req);
    assert_eq!(&out[..2], &[0x81, 0x0B]);
    assert_eq!(&out[12..16], &[0, 0, 0, 7]);
    assert_eq!(&out[24..], b"1.6.45");
}

#[test]
fn garbage_never_panics() {
    let f = fake();
    for input in [&b"\x80\x01\x00\xff\x08\x00\x00\x00\x00\x00\x00\x04abcd\x00\x00\x00\x00\x00\x00\x00\x00xxxx"[..], b"ms k -1\r\nmg\r\nma k MD D-1\r\nset k 0 0 99999999999\r\n", b"gat 1_0 a\r\nmd k I T1 Ex\r\nnoreply\r\n"] {
        let mut s = Session::new();
        let _ = run(&f, &mut s, input);
    }
}

#[test]
fn a_wire_answers_in_memory_and_closes_on_down() {
    let f = fake();
    let mut w = Wire::connect(Arc::clone(&f), ("127.0.0.1", 1), Duration::from_millis(50)).unwrap();
    assert_eq!(w.send(b"version\r\n").unwrap(), 9);
    let mut buf = [0u8; 64];
    let n = w.recv(&mut buf, false).unwrap();
    assert_eq!(&buf[..n], b"VERSION 1.6.45\r\n");
    assert_eq!(
        w.recv(&mut buf, false).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    assert_eq!(
        w.recv(&mut buf, true).unwrap_err().kind(),
        std::io::ErrorKind::TimedOut
    );
    f.set_delay(f64::INFINITY);
    w.send(b"mn\r\n").unwrap();
    assert!(w.recv(&mut buf, true).is_err());
    f.set_delay(0.0);
    assert_eq!(w.recv(&mut buf, true).unwrap(), 4);
    f.set_down(true);
    assert!(!w.peer_still_open(0));
    assert_eq!(w.recv(&mut buf, true).unwrap(), 0);
    assert!(w.send(b"mn\r\n").is_err());
    assert!(Wire::connect(Arc::clone(&f), ("127.0.0.1", 1), Duration::from_millis(50)).is_err());
    f.set_down(false);
    assert!(Wire::connect(f, ("127.0.0.1", 1), Duration::from_millis(50)).is_ok());
}

#[test]
fn the_registry_finds_a_fake_by_address() {
    let f = fake();
    register("127.0.0.1", 1, &f);
    assert!(lookup("127.0.0.1", 1).is_some());
    assert!(lookup("127.0.0.1", 2).is_none());
    unregister("127.0.0.1", 1);
    assert!(lookup("127.0.0.1", 1).is_none());
}

/// Whether `w`'s descriptor is readable now.
#[cfg(target_os = "linux")]
fn readable(w: &Wire) -> bool {
    use rustix::event::{poll, PollFd, PollFlags};
    let mut fds = [PollFd::from_borrowed_fd(w.fd(), PollFlags::IN)];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    poll(&mut fds, Some(&zero)).unwrap() == 1
}

#[cfg(target_os = "linux")]
#[test]
fn the_descriptor_sleeps_while_a_reply_is_held() {
    let f = fake();
    let mut w = Wire::connect(Arc::clone(&f), ("127.0.0.1", 1), Duration::from_secs(1)).unwrap();
    assert!(readable(&w));
    f.set_delay(f64::INFINITY);
    w.send(b"mn\r\n").unwrap();
    let mut buf = [0u8; 16];
    assert!(w.recv(&mut buf, false).is_err());
    assert!(!readable(&w)); // a poll loop sleeps (up to RECHECK) instead of spinning
    f.set_delay(0.0);
    std::thread::sleep(Duration::from_millis(20));
    assert!(readable(&w)); // and comes back to find the reply released
    assert_eq!(w.recv(&mut buf, false).unwrap(), 4);
    w.send(b"mn\r\n").unwrap();
    assert!(readable(&w));
}
