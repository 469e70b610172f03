//! Reply routing fed plain bytes: which keys each unit answers, with no socket.

use std::borrow::Cow;

use super::*;
use crate::client::batch::ServerBatch;
use crate::client::results::StoreStatus;
use crate::client::sink::{LineSink, Sink};

type Stores = LineSink<StoreStatus, fn(Reply<'_>) -> Result<StoreStatus>>;

fn stores(n: usize) -> Stores {
    fn map(r: Reply<'_>) -> Result<StoreStatus> {
        match r {
            Reply::Stored => Ok(StoreStatus::Stored),
            Reply::NotStored => Ok(StoreStatus::NotStored),
            _ => Err(unexpected()),
        }
    }
    LineSink::new(
        n,
        map as fn(Reply<'_>) -> Result<StoreStatus>,
        Some(StoreStatus::Stored),
    )
}

/// Route `input` in one go; the outcomes, and what `route` returned.
fn run(batch: &ServerBatch, input: &[u8], sink: &mut dyn Sink) -> (Replies, Result<Routed>) {
    let mut replies = Replies::default();
    let r = replies.route(batch, false, input, sink);
    (replies, r)
}

fn get_batch(keys: usize, wire: &[Cow<'_, [u8]>]) -> ServerBatch<'static> {
    let mut b = ServerBatch::new(0);
    b.keys = (0..keys as u32).collect();
    b.encode_gets(wire, false, false, None);
    b
}

#[test]
fn a_hit_not_asked_for_breaks_the_stream_and_revokes_every_key() {
    let wire: Vec<Cow<'_, [u8]>> = vec![Cow::Borrowed(b"a"), Cow::Borrowed(b"b")];
    let batch = get_batch(2, &wire);
    let mut sink = crate::client::op::get::sink::GetSink::new(&wire[..], 0);
    let input = b"VALUE a 0 1\r\nA\r\nVALUE zz 0 1\r\nZ\r\nEND\r\n";
    let (replies, r) = run(&batch, input, &mut sink);
    let e = r.unwrap_err();
    assert!(matches!(e, Error::Protocol(_)), "{e:?}");
    replies.fail_rest(&batch, &mut sink, &e);
    let f = sink.into_fetched();
    // Not even the hit that looked right is trusted.
    assert!(f.items.iter().all(|r| r.is_err()), "{:?}", f.items);
}

#[test]
fn a_proxy_reply_out_of_order_with_an_error_line_keeps_the_stream() {
    let wire: Vec<Cow<'_, [u8]>> = [&b"a"[..], b"b", b"c"].map(Cow::Borrowed).to_vec();
    let batch = get_batch(3, &wire);
    let mut sink = crate::client::op::get::sink::GetSink::new(&wire[..], 0);
    let input = b"VALUE c 0 1\r\nC\r\nSERVER_ERROR backend failure\r\nVALUE a 0 1\r\nA\r\nEND\r\n";
    let (replies, r) = run(&batch, input, &mut sink);
    assert_eq!(r.unwrap().used, input.len());
    assert!(replies.complete(&batch));
    let f = sink.into_fetched();
    assert!(f.items[1].is_err());
    assert_eq!(
        f.bytes(f.items[0].as_ref().unwrap().as_ref().unwrap()),
        b"A"
    );
    assert_eq!(
        f.bytes(f.items[2].as_ref().unwrap().as_ref().unwrap()),
        b"C"
    );
}

#[test]
fn out_of_memory_ends_a_get_reply() {
    // memcached's own "SERVER_ERROR out of memory writing get response" is the whole reply.
    let wire: Vec<Cow<'_, [u8]>> = vec![Cow::Borrowed(b"a"), Cow::Borrowed(b"b")];
    let batch = get_batch(2, &wire);
    let mut sink = crate::client::op::get::sink::GetSink::new(&wire[..], 0);
    let input = b"SERVER_ERROR out of memory writing get response\r\n";
    let (replies, r) = run(&batch, input, &mut sink);
    assert_eq!(r.unwrap().used, input.len());
    assert!(replies.complete(&batch));
    assert!(sink
        .out
        .finish()
        .iter()
        .all(|r| *r == Err(Error::OutOfMemory)));
}

#[test]
fn an_error_line_between_two_answered_keys_of_a_quiet_batch() {
    let mut batch = ServerBatch::new(0);
    for k in 0..4 {
        batch.push_quiet(k);
    }
    batch.close_quiet(ReplyKind::MetaStore);
    let mut sink = stores(4);
    let input = b"NS O0\r\nSERVER_ERROR out of memory storing object\r\nNS O3\r\nMN\r\n";
    let (replies, r) = run(&batch, input, &mut sink);
    assert_eq!(r.unwrap().used, input.len());
    assert!(replies.complete(&batch));
    assert!(replies.error_reply);
    assert_eq!(sink.ambiguous, [1, 2]);
    let out = sink.out.finish();
    assert_eq!(out[0], Ok(StoreStatus::NotStored));
    assert_eq!(out[1], Err(Error::OutOfMemory));
    assert_eq!(out[3], Ok(StoreStatus::NotStored));
}

#[test]
fn a_partial_unit_waits_and_later_bytes_complete_it() {
    let mut batch = ServerBatch::new(0);
    batch.push_req(ReplyKind::Storage, 0);
    batch.push_req(ReplyKind::Storage, 1);
    let mut sink = stores(2);
    let mut replies = Replies::default();
    let input = b"STORED\r\nNOT_ST";
    let d = replies.route(&batch, false, input, &mut sink).unwrap();
    assert_eq!(d.used, 8);
    assert!(!replies.complete(&batch));
    let d = replies
        .route(&batch, false, b"NOT_STORED\r\n", &mut sink)
        .unwrap();
    assert_eq!(d.used, 12);
    assert!(replies.complete(&batch));
}

#[test]
fn a_sync_marker_reads_what_earlier_noreply_writes_owed() {
    let mut batch = ServerBatch::new(0);
    batch.push_req(ReplyKind::Storage, 0);
    batch.prepend_sync();
    let mut sink = stores(1);
    // An error line owed by an earlier noreply write, then the marker, then this reply.
    let input = b"SERVER_ERROR out of memory storing object\r\nVERSION 1.6\r\nSTORED\r\n";
    let (replies, r) = run(&batch, input, &mut sink);
    assert!(r.unwrap().synced);
    assert_eq!(replies.owed_errors, 1);
    assert_eq!(sink.out.finish(), [Ok(StoreStatus::Stored)]);
}

#[test]
fn a_reply_that_fits_no_request_is_a_protocol_error() {
    let mut batch = ServerBatch::new(0);
    batch.push_req(ReplyKind::Storage, 0);
    let mut sink = stores(1);
    let (_, r) = run(&batch, b"DELETED\r\n", &mut sink);
    assert!(matches!(r, Err(Error::Protocol(_))));
}

/// A binary response header and body: a GETKQ hit for `key` with `opaque`.
fn binary_hit(key: &[u8], value: &[u8], opaque: u32) -> Vec<u8> {
    let body = 4 + key.len() + value.len();
    let mut b = vec![0x81, 0x0d];
    b.extend_from_slice(&(key.len() as u16).to_be_bytes());
    b.extend_from_slice(&[4, 0, 0, 0]);
    b.extend_from_slice(&(body as u32).to_be_bytes());
    b.extend_from_slice(&opaque.to_be_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(key);
    b.extend_from_slice(value);
    b
}

#[test]
fn binary_hits_are_matched_by_opaque_and_may_not_go_back() {
    let wire: Vec<Cow<'_, [u8]>> = vec![Cow::Borrowed(b"a"), Cow::Borrowed(b"b")];
    let mut batch = ServerBatch::new(0);
    batch.keys = [0, 1].into_iter().collect();
    batch.encode_gets(&wire, false, true, None);
    let mut sink = crate::client::op::get::sink::GetSink::new(&wire[..], 0);
    let mut replies = Replies::default();
    let first = binary_hit(b"b", b"B", 1);
    let d = replies.route(&batch, true, &first, &mut sink).unwrap();
    assert_eq!(d.used, first.len());
    let r = replies.route(&batch, true, &binary_hit(b"a", b"A", 0), &mut sink);
    assert_eq!(r, Err(Error::Protocol("a hit out of order".into())));
}

#[test]
fn a_value_header_announces_the_room_to_make_and_one_over_the_limit_is_refused() {
    let wire: Vec<Cow<'_, [u8]>> = vec![Cow::Borrowed(b"a"), Cow::Borrowed(b"b")];
    let batch = get_batch(2, &wire);
    let mut sink = crate::client::op::get::sink::GetSink::new(&wire[..], 0);
    let mut replies = Replies {
        max_value: 1000,
        ..Replies::default()
    };
    // A hit, then the header of a value of 1,000 bytes: room for exactly its unit.
    let input = b"VALUE a 0 1\r\nA\r\nVALUE b 0 1000\r\nxx";
    let d = replies.route(&batch, false, input, &mut sink).unwrap();
    assert_eq!(d.used, 16);
    assert_eq!(d.need, Some(16 + 1000 + 2));
    // One byte more is refused before any of it is read, as a value that came whole.
    let mut replies = Replies {
        max_value: 999,
        ..Replies::default()
    };
    let r = replies.route(&batch, false, &input[16..], &mut sink);
    assert!(matches!(r, Err(Error::Alloc(_))), "{r:?}");
    let mut replies = Replies {
        max_value: 0,
        ..Replies::default()
    };
    let r = replies.route(&batch, false, &input[..16], &mut sink);
    assert!(matches!(r, Err(Error::Alloc(_))), "{r:?}");
    // The binary protocol: the header's body length, less its key and extras.
    let mut replies = Replies {
        max_value: 10,
        ..Replies::default()
    };
    let mut batch = ServerBatch::new(0);
    batch.keys = [0, 1].into_iter().collect();
    batch.encode_gets(&wire, false, true, None);
    let mut header = binary_hit(b"a", &[b'x'; 11], 0);
    header.truncate(24);
    let r = replies.route(&batch, true, &header, &mut sink);
    assert!(matches!(r, Err(Error::Alloc(_))), "{r:?}");
}
