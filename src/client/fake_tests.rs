//! The fake is part of every operation: a real `Client` asks the in-process fake
//! (`crate::fake`, registered at an address so that connections to it never leave the process)
//! for one request of every reply kind it knows and every meta verb it sends whole, and each
//! must be answered, never with `ERROR`. A new `ReplyKind` does not compile here without its
//! request; a new `MetaVerb` is sent by its row in `MetaVerb::ALL`.

use std::sync::Arc;

use super::op::arith::Create;
use super::op::meta::MetaVerb;
use super::results::ServerSpec;
use super::results::StoreStatus;
use super::Client;
use crate::behaviors::Behaviors;
use crate::connection::connect::Address;
use crate::error::Error;
use crate::fake::store::Clock;
use crate::fake::{self, Fake};
use crate::protocol::{ReplyKind, StoreCmd, StoreItem};
use crate::server::MetaSupport;

/// A failure the fake must never cause: a command it did not know.
fn refused(e: &Error) -> bool {
    matches!(e, Error::UnknownCommand | Error::NotSupported(_))
}

fn item(key: &[u8]) -> StoreItem<'_> {
    StoreItem {
        key,
        flags: 0,
        exptime: 0,
        data: b"1",
        cas: 0,
    }
}

#[test]
fn the_fake_answers_every_reply_kind_and_every_meta_verb() {
    let port = 1; // never listened on: the registered fake answers it in-process
    let fake = Arc::new(Fake::new(
        Arc::new(Clock::new(None, false)),
        1 << 20,
        b"1.6.45",
    ));
    fake::register("127.0.0.1", port, &fake);
    let spec = ServerSpec {
        address: Address::Tcp {
            host: "127.0.0.1".into(),
            port,
        },
        weight: 1,
    };
    let c = Client::new(vec![spec], Behaviors::default(), Vec::new()).unwrap();
    let keys: [&[u8]; 2] = [b"a", b"b"];
    for kind in ReplyKind::ALL {
        let ok = match kind {
            ReplyKind::Retrieval => c.get_multi(&keys, true).items.iter().all(|r| r.is_ok()),
            ReplyKind::Storage => {
                let s = c.store_multi(StoreCmd::Set, &[item(b"a")], false);
                s.iter().all(|r| matches!(r, Ok(StoreStatus::Stored)))
            }
            ReplyKind::Delete => c.delete_multi(&keys[..1], false).iter().all(|r| r.is_ok()),
            ReplyKind::Arith => {
                let create = Some(Create {
                    initial: 1,
                    exptime: 0,
                });
                let r = c.arith_multi(true, &[b"n"], 1, create);
                r.iter()
                    .chain(&c.arith_multi(true, &[b"n"], 1, None))
                    .all(|r| r.is_ok())
            }
            ReplyKind::Touch => c.touch_multi(&keys, 10, false).iter().all(|r| r.is_ok()),
            ReplyKind::Ok => c.flush_all(0).iter().all(|r| r.is_ok()),
            ReplyKind::Stats => c.stats(b"").iter().all(|(_, r)| r.is_ok()),
            ReplyKind::Version => c.warm_up(1).iter().all(|(_, r)| r.is_ok()),
            // Both quiet batches, once the probe (below) has told that the server speaks meta.
            ReplyKind::MetaStore => {
                let items = [item(b"a"), item(b"b")];
                let s = c.store_multi(StoreCmd::Set, &items, false);
                s.iter().all(|r| matches!(r, Ok(StoreStatus::Stored)))
            }
            ReplyKind::MetaDelete => c.delete_multi(&keys, false).iter().all(|r| r.is_ok()),
            ReplyKind::MetaProbe => {
                super::op::meta::learn_meta_support(&c.snapshot());
                c.topo().servers[0].meta_support() == MetaSupport::Yes
            }
            ReplyKind::MetaCmd => MetaVerb::ALL.iter().all(|&verb| {
                c.meta_command(verb, &keys, b"")
                    .iter()
                    .all(|r| !matches!(r, Err(e) if refused(e)))
            }),
        };
        assert!(ok, "{kind:?} went unanswered by the fake");
    }
    fake::unregister("127.0.0.1", port);
}
