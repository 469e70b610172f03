//! The sinks fed `Reply` values directly: no parser, no socket (get's own: `op/get/sink_tests.rs`).

use super::*;
use crate::client::quiet::QuietBatch;
use crate::client::results::StoreStatus;
use crate::protocol::MetaStatus;

fn store_sink() -> LineSink<StoreStatus, impl FnMut(Reply<'_>) -> Result<StoreStatus>> {
    LineSink::new(
        4,
        |r: Reply<'_>| match r {
            Reply::Stored => Ok(StoreStatus::Stored),
            Reply::NotStored => Ok(StoreStatus::NotStored),
            Reply::Exists => Ok(StoreStatus::Exists),
            _ => Err(unexpected()),
        },
        Some(StoreStatus::Stored),
    )
}

#[test]
fn a_key_without_any_outcome_fails() {
    let out: Outcomes<bool> = Outcomes::new(2);
    assert!(out
        .finish()
        .iter()
        .all(|r| matches!(r, Err(Error::Protocol(_)))));
}

#[test]
fn quiet_batch_error_line_between_two_answered_keys_is_ambiguous() {
    let mut sink = store_sink();
    let mut quiet = QuietBatch::default();
    let keys = [0, 1, 2, 3];
    let meta = |status, opaque| Reply::Meta { status, opaque };
    assert!(!quiet
        .reply(&mut sink, &keys, meta(MetaStatus::NotStored, 0))
        .unwrap());
    assert!(!quiet
        .reply(&mut sink, &keys, Reply::Failed(Error::OutOfMemory))
        .unwrap());
    assert!(!quiet
        .reply(&mut sink, &keys, meta(MetaStatus::Exists, 3))
        .unwrap());
    assert!(quiet.reply(&mut sink, &keys, Reply::MetaNoop).unwrap());
    // The error belongs to key 1 or key 2: both fail, both are to be read back.
    assert_eq!(sink.ambiguous, [1, 2]);
    let out = sink.out.finish();
    assert_eq!(out[0], Ok(StoreStatus::NotStored));
    assert_eq!(out[1], Err(Error::OutOfMemory));
    assert_eq!(out[2], Err(Error::OutOfMemory));
    assert_eq!(out[3], Ok(StoreStatus::Exists));
}

#[test]
fn quiet_batch_error_before_mn_covers_the_rest_and_mn_completes_others() {
    let mut sink = store_sink();
    let mut quiet = QuietBatch::default();
    let keys = [0, 1, 2, 3];
    let meta = Reply::Meta {
        status: MetaStatus::NotStored,
        opaque: 1,
    };
    quiet.reply(&mut sink, &keys, meta).unwrap();
    quiet
        .reply(&mut sink, &keys, Reply::Failed(Error::TooBig))
        .unwrap();
    quiet.reply(&mut sink, &keys, Reply::MetaNoop).unwrap();
    assert_eq!(sink.ambiguous, [2, 3]);
    let out = sink.out.finish();
    assert_eq!(out[0], Ok(StoreStatus::Stored)); // completed by MN
    assert_eq!(out[1], Ok(StoreStatus::NotStored));
    assert_eq!(out[2], Err(Error::TooBig));
}

#[test]
fn quiet_batch_rejects_a_token_that_was_not_sent_or_goes_back() {
    let mut sink = store_sink();
    let mut quiet = QuietBatch::default();
    let keys = [0, 1];
    let meta = |opaque| Reply::Meta {
        status: MetaStatus::NotStored,
        opaque,
    };
    let beyond = quiet.reply(&mut sink, &keys, meta(2));
    assert!(matches!(beyond, Err(Error::Protocol(_))));
    quiet.reply(&mut sink, &keys, meta(1)).unwrap();
    let back = quiet.reply(&mut sink, &keys, meta(0));
    assert!(matches!(back, Err(Error::Protocol(_))));
}

#[test]
fn a_resumable_line_error_is_the_key_outcome_a_broken_one_is_returned() {
    let mut sink = store_sink();
    let r = sink.reply(
        ReplyKind::Storage,
        &[1],
        &mut 0,
        Reply::Failed(Error::TooBig),
    );
    assert_eq!(r, Ok(true));
    let r = sink.reply(ReplyKind::Storage, &[2], &mut 0, Reply::Deleted);
    assert!(matches!(r, Err(Error::Protocol(_))));
    assert_eq!(sink.out.finish()[1], Err(Error::TooBig));
}

#[test]
fn a_quiet_batch_with_more_error_lines_than_keys_breaks_the_stream() {
    let mut sink = store_sink();
    let mut quiet = QuietBatch::default();
    let keys = [0, 1];
    let failed = || Reply::Failed(Error::OutOfMemory);
    for _ in 0..keys.len() {
        assert!(!quiet.reply(&mut sink, &keys, failed()).unwrap());
    }
    let r = quiet.reply(&mut sink, &keys, failed());
    assert!(matches!(r, Err(Error::Protocol(_))), "{r:?}");
    // MN ends the segment: the next one may have as many again.
    let mut quiet = QuietBatch::default();
    quiet.reply(&mut sink, &keys, failed()).unwrap();
    quiet.reply(&mut sink, &keys, failed()).unwrap();
    assert!(quiet.reply(&mut sink, &keys, Reply::MetaNoop).unwrap());
    assert_eq!(sink.ambiguous, [0, 1]); // once, however many lines
    quiet.reply(&mut sink, &keys, failed()).unwrap();
    quiet.reply(&mut sink, &keys, failed()).unwrap();
}
