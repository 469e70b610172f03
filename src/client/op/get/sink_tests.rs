//! Get's sink fed `Reply` values directly: no parser, no socket.

use std::borrow::Cow;

use super::*;
use crate::client::claim::CLAIM_FROM;

fn get_sink<'a>(wire: &'a [Cow<'a, [u8]>]) -> GetSink<&'a [Cow<'a, [u8]>]> {
    GetSink::new(wire, 0)
}

fn value<'a>(key: &'a [u8], data: &'a [u8]) -> Reply<'a> {
    Reply::Value {
        key,
        flags: 7,
        cas: None,
        data,
    }
}

fn wire(keys: &[&'static [u8]]) -> Vec<Cow<'static, [u8]>> {
    keys.iter().map(|k| Cow::Borrowed(*k)).collect()
}

/// Each outcome as a short string: the value's bytes, "miss", or "err".
fn fetched<W: WireKeys>(sink: GetSink<W>) -> Vec<String> {
    let f = sink.into_fetched();
    f.items
        .iter()
        .map(|r| match r {
            Ok(Some(item)) => String::from_utf8_lossy(f.bytes(item)).into_owned(),
            Ok(None) => "miss".into(),
            Err(_) => "err".into(),
        })
        .collect()
}

#[test]
fn hits_in_request_order_skip_misses() {
    let w = wire(&[b"a", b"b", b"c", b"d"]);
    let mut sink = get_sink(&w);
    let keys = [0, 1, 2, 3];
    let mut cursor = 0;
    let kind = ReplyKind::Retrieval;
    assert!(!sink
        .reply(kind, &keys, &mut cursor, value(b"b", b"B"))
        .unwrap());
    assert!(!sink
        .reply(kind, &keys, &mut cursor, value(b"d", b"D"))
        .unwrap());
    assert!(sink.reply(kind, &keys, &mut cursor, Reply::End).unwrap());
    assert_eq!(fetched(sink), ["miss", "B", "miss", "D"]);
}

#[test]
fn hits_out_of_order_are_matched_by_their_key() {
    // twemproxy may answer a multi-key get out of request order.
    let w = wire(&[b"a", b"b", b"c"]);
    let mut sink = get_sink(&w);
    let keys = [0, 1, 2];
    let mut cursor = 0;
    let kind = ReplyKind::Retrieval;
    sink.reply(kind, &keys, &mut cursor, value(b"c", b"C"))
        .unwrap();
    sink.reply(kind, &keys, &mut cursor, value(b"a", b"A"))
        .unwrap();
    sink.reply(kind, &keys, &mut cursor, Reply::End).unwrap();
    assert_eq!(fetched(sink), ["A", "miss", "C"]);
}

#[test]
fn a_hit_not_asked_for_or_twice_is_a_protocol_error() {
    let w = wire(&[b"a", b"b"]);
    let kind = ReplyKind::Retrieval;
    let mut sink = get_sink(&w);
    let err = sink.reply(kind, &[0, 1], &mut 0, value(b"zz", b"Z"));
    assert!(matches!(err, Err(Error::Protocol(_))), "{err:?}");
    let mut sink = get_sink(&w);
    let mut cursor = 0;
    sink.reply(kind, &[0, 1], &mut cursor, value(b"b", b"B"))
        .unwrap();
    let err = sink.reply(kind, &[0, 1], &mut cursor, value(b"b", b"B"));
    assert!(matches!(err, Err(Error::Protocol(_))), "{err:?}");
    // A key of another request of the batch is not this request's.
    let mut sink = get_sink(&w);
    let err = sink.reply(kind, &[0], &mut 0, value(b"b", b"B"));
    assert!(matches!(err, Err(Error::Protocol(_))), "{err:?}");
}

#[test]
fn a_server_error_line_fails_only_the_keys_between_two_hits() {
    // memcached's proxy answers a key whose backend failed with an error line in its place.
    let w = wire(&[b"a", b"b", b"c", b"d", b"e"]);
    let mut sink = get_sink(&w);
    let keys = [0, 1, 2, 3, 4];
    let mut cursor = 0;
    let kind = ReplyKind::Retrieval;
    let failed = || Reply::Failed(Error::ServerError("backend failure".into()));
    sink.reply(kind, &keys, &mut cursor, value(b"a", b"A"))
        .unwrap();
    assert!(!sink.reply(kind, &keys, &mut cursor, failed()).unwrap());
    sink.reply(kind, &keys, &mut cursor, value(b"d", b"D"))
        .unwrap();
    assert!(sink.reply(kind, &keys, &mut cursor, Reply::End).unwrap());
    // b or c failed (the line does not say which): both fail, to be read again; e is a miss.
    assert_eq!(sink.ambiguous, [1, 2]);
    assert_eq!(fetched(sink), ["A", "err", "err", "D", "miss"]);
}

#[test]
fn as_many_error_lines_as_keys_without_a_hit_pin_them() {
    let w = wire(&[b"a", b"b", b"c", b"d"]);
    let mut sink = get_sink(&w);
    let keys = [0, 1, 2, 3];
    let mut cursor = 0;
    let kind = ReplyKind::Retrieval;
    let failed = || Reply::Failed(Error::ServerError("backend failure".into()));
    sink.reply(kind, &keys, &mut cursor, value(b"a", b"A"))
        .unwrap();
    sink.reply(kind, &keys, &mut cursor, failed()).unwrap();
    sink.reply(kind, &keys, &mut cursor, failed()).unwrap();
    sink.reply(kind, &keys, &mut cursor, value(b"d", b"D"))
        .unwrap();
    sink.reply(kind, &keys, &mut cursor, Reply::End).unwrap();
    assert!(sink.ambiguous.is_empty());
    assert_eq!(fetched(sink), ["A", "err", "err", "D"]);
}

#[test]
fn a_server_error_line_first_or_last_covers_its_side() {
    let w = wire(&[b"a", b"b", b"c"]);
    let kind = ReplyKind::Retrieval;
    let failed = || Reply::Failed(Error::ServerError("backend failure".into()));
    let mut sink = get_sink(&w);
    let mut cursor = 0;
    sink.reply(kind, &[0, 1, 2], &mut cursor, failed()).unwrap();
    sink.reply(kind, &[0, 1, 2], &mut cursor, value(b"b", b"B"))
        .unwrap();
    sink.reply(kind, &[0, 1, 2], &mut cursor, Reply::End)
        .unwrap();
    assert!(sink.ambiguous.is_empty());
    assert_eq!(fetched(sink), ["err", "B", "miss"]);
    let mut sink = get_sink(&w);
    let mut cursor = 0;
    sink.reply(kind, &[0, 1, 2], &mut cursor, value(b"a", b"A"))
        .unwrap();
    sink.reply(kind, &[0, 1, 2], &mut cursor, failed()).unwrap();
    sink.reply(kind, &[0, 1, 2], &mut cursor, Reply::End)
        .unwrap();
    assert_eq!(sink.ambiguous, [1, 2]);
    assert_eq!(fetched(sink), ["A", "err", "err"]);
}

#[test]
fn to_a_get_of_one_key_an_error_line_is_the_whole_reply() {
    // twemproxy and memcached's proxy answer a single get whose backend failed so, with no END.
    let w = wire(&[b"a"]);
    let mut sink = get_sink(&w);
    let failed = Reply::Failed(Error::ServerError("Connection refused".into()));
    let r = sink.reply(ReplyKind::Retrieval, &[0], &mut 0, failed);
    assert_eq!(r, Err(Error::ServerError("Connection refused".into())));
}

#[test]
fn with_hits_out_of_order_an_error_line_fails_every_key_without_a_hit() {
    let w = wire(&[b"a", b"b", b"c", b"d"]);
    let mut sink = get_sink(&w);
    let keys = [0, 1, 2, 3];
    let mut cursor = 0;
    let kind = ReplyKind::Retrieval;
    let failed = Reply::Failed(Error::ServerError("backend failure".into()));
    sink.reply(kind, &keys, &mut cursor, value(b"c", b"C"))
        .unwrap();
    sink.reply(kind, &keys, &mut cursor, failed).unwrap();
    sink.reply(kind, &keys, &mut cursor, value(b"a", b"A"))
        .unwrap();
    sink.reply(kind, &keys, &mut cursor, Reply::End).unwrap();
    assert_eq!(sink.ambiguous, [1, 3]);
    assert_eq!(fetched(sink), ["A", "err", "C", "err"]);
}

#[test]
fn an_error_line_inside_a_get_reply_breaks_the_stream() {
    let w = wire(&[b"a", b"b"]);
    let mut sink = get_sink(&w);
    let (keys, mut cursor) = ([0, 1], 0);
    let kind = ReplyKind::Retrieval;
    // First thing: a failure of the request (resumable, the driver fails its keys).
    let first = sink.reply(
        kind,
        &keys,
        &mut cursor,
        Reply::Failed(Error::UnknownCommand),
    );
    assert_eq!(first, Err(Error::UnknownCommand));
    sink.reply(kind, &keys, &mut cursor, value(b"a", b"A"))
        .unwrap();
    let mid = sink.reply(
        kind,
        &keys,
        &mut cursor,
        Reply::Failed(Error::UnknownCommand),
    );
    assert!(matches!(mid, Err(Error::Protocol(_))), "{mid:?}");
}

#[test]
fn revoke_overrides_outcomes_fail_does_not() {
    let w = wire(&[b"a", b"b"]);
    let mut sink = get_sink(&w);
    let mut cursor = 0;
    let kind = ReplyKind::Retrieval;
    sink.reply(kind, &[0, 1], &mut cursor, value(b"a", b"A"))
        .unwrap();
    sink.fail(&[0, 1], &Error::Timeout);
    let mut revoked = get_sink(&w);
    revoked
        .reply(kind, &[0, 1], &mut 0, value(b"a", b"A"))
        .unwrap();
    revoked.revoke(&[0, 1], &Error::Protocol("x".into()));
    assert_eq!(fetched(sink), ["A", "err"]);
    assert_eq!(fetched(revoked), ["err", "err"]);
}

#[test]
fn owned_wire_keys_match_hits_as_the_borrowed_ones_do() {
    let keys = wire(&[b"", b"a", b"bb", b"a-long-key"]);
    let owned = crate::client::keys::Keys::of(&keys);
    assert_eq!(owned.count(), 4);
    assert_eq!(owned.key(0), b"");
    assert_eq!(owned.key(3), b"a-long-key");
    let mut sink = GetSink::new(owned, 0);
    let idx = [0, 1, 2, 3];
    let mut cursor = 0;
    for (k, v) in [(&b"bb"[..], &b"two"[..]), (b"a-long-key", b"three")] {
        let r = sink.reply(ReplyKind::Retrieval, &idx, &mut cursor, value(k, v));
        assert!(matches!(r, Ok(false)));
    }
    let r = sink.reply(ReplyKind::Retrieval, &idx, &mut cursor, Reply::End);
    assert!(matches!(r, Ok(true)));
    assert_eq!(fetched(sink), ["miss", "miss", "two", "three"]);
}

#[test]
fn a_get_reply_with_more_error_lines_than_keys_breaks_the_stream() {
    let w = wire(&[b"a", b"b", b"c"]);
    let keys = [0, 1, 2];
    let kind = ReplyKind::Retrieval;
    let failed = || Reply::Failed(Error::ServerError("backend failure".into()));
    let mut sink = get_sink(&w);
    let mut cursor = 0;
    for _ in 0..keys.len() {
        assert!(!sink.reply(kind, &keys, &mut cursor, failed()).unwrap());
    }
    // One line per key at most; and the lines kept do not grow with the lines sent.
    assert_eq!(sink.errors.len(), 1);
    let r = sink.reply(kind, &keys, &mut cursor, failed());
    assert!(matches!(r, Err(Error::Protocol(_))), "{r:?}");
    // A new request starts counting again.
    let mut sink = get_sink(&w);
    let mut cursor = 0;
    sink.reply(kind, &keys, &mut cursor, failed()).unwrap();
    sink.reply(kind, &keys, &mut cursor, value(b"b", b"B"))
        .unwrap();
    sink.reply(kind, &keys, &mut cursor, failed()).unwrap();
    assert_eq!(sink.errors.len(), 2);
    assert!(sink.reply(kind, &keys, &mut cursor, Reply::End).unwrap());
    assert_eq!(fetched(sink), ["err", "B", "err"]);
}

#[test]
fn a_large_value_in_a_grown_buffer_is_claimed_and_keeps_that_buffer() {
    let w = wire(&[b"a", b"b", b"c"]);
    let mut sink = get_sink(&w);
    let (keys, kind, mut cursor) = ([0, 1, 2], ReplyKind::Retrieval, 0);
    let big = vec![b'L'; CLAIM_FROM + 1];
    let unit = [b"head".as_slice(), &big].concat();
    sink.claims.allow(true);
    sink.reply(kind, &keys, &mut cursor, value(b"a", &unit[4..]))
        .unwrap();
    // One claim per dispatch: a second large value is copied.
    sink.reply(kind, &keys, &mut cursor, value(b"b", &big))
        .unwrap();
    sink.reply(kind, &keys, &mut cursor, value(b"c", b"C"))
        .unwrap();
    assert!(sink.data.len() < 2 * big.len());
    let at = unit[4..].as_ptr();
    assert_eq!(sink.claims.pending(), Some((at as usize, big.len())));
    assert_eq!(sink.claims.settle(Some((unit, 4))), None);
    assert_eq!(sink.claims.pending(), None);
    let f = sink.into_fetched();
    let got: Vec<&[u8]> = f
        .items
        .iter()
        .map(|r| f.bytes(r.as_ref().unwrap().as_ref().unwrap()))
        .collect();
    assert_eq!(got, [&big[..], &big[..], b"C"]);
    // The claimed value's bytes are those of the buffer handed over, not a copy.
    assert_eq!(got[0].as_ptr(), at);
}

#[test]
fn a_claim_is_made_only_where_allowed_and_its_key_is_given_back_if_not_settled() {
    let w = wire(&[b"a"]);
    let big = vec![b'L'; CLAIM_FROM + 1];
    let (kind, mut cursor) = (ReplyKind::Retrieval, 0);
    let mut sink = get_sink(&w);
    sink.reply(kind, &[0], &mut cursor, value(b"a", &big))
        .unwrap();
    assert_eq!(sink.claims.pending(), None);
    assert_eq!(fetched(sink), [String::from_utf8(big.clone()).unwrap()]);
    let (mut sink, mut cursor) = (get_sink(&w), 0);
    sink.claims.allow(true);
    sink.reply(kind, &[0], &mut cursor, value(b"a", &big))
        .unwrap();
    assert!(sink.claims.pending().is_some());
    // No buffer came: the key to fail is given back, and revoked it fails.
    assert_eq!(sink.claims.settle(None), Some(0));
    sink.revoke(&[0], &Error::Protocol("lost".into()));
    assert_eq!(fetched(sink), ["err"]);
}
