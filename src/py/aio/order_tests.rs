//! The per-key order's decisions, request by request: no client, no server.

use super::*;

const R: Access = Access::Read;
const W: Access = Access::Write;

/// A touch's or gat's access.
fn ttl(seconds: u32) -> Access {
    Access::expiry(seconds)
}

fn h(keys: &[&str]) -> Option<Vec<u64>> {
    Some(keys.iter().map(|k| key_hash(k.as_bytes())).collect())
}

fn rel(o: &mut KeyOrder<&'static str>, t: u64) -> Vec<(u64, &'static str)> {
    o.release(t);
    o.take_ready()
}

fn go(a: Admitted<&'static str>) -> u64 {
    match a {
        Admitted::Go(t, _) => t,
        Admitted::Parked => panic!("parked"),
    }
}

fn parked(a: Admitted<&'static str>) -> bool {
    matches!(a, Admitted::Parked)
}

#[test]
fn a_write_waits_for_an_earlier_request_of_its_key_and_goes_after_it() {
    let mut o = KeyOrder::default();
    let set = go(o.admit(h(&["k"]), W, "set"));
    assert!(parked(o.admit(h(&["k"]), W, "delete")));
    assert!(parked(o.admit(h(&["k"]), R, "get")));
    let other = go(o.admit(h(&["other"]), W, "set other"));
    let next = rel(&mut o, set);
    assert_eq!(next.iter().map(|p| p.1).collect::<Vec<_>>(), ["delete"]);
    assert!(rel(&mut o, other).is_empty());
    let next = rel(&mut o, next[0].0);
    assert_eq!(next.iter().map(|p| p.1).collect::<Vec<_>>(), ["get"]);
    rel(&mut o, next[0].0);
    assert!(o.is_empty() && o.narrow.is_empty());
}

#[test]
fn reads_of_one_key_run_side_by_side_but_not_past_a_write() {
    let mut o = KeyOrder::default();
    let r1 = go(o.admit(h(&["k"]), R, "get1"));
    let r2 = go(o.admit(h(&["k"]), R, "get2"));
    assert!(parked(o.admit(h(&["k"]), W, "set")));
    // a read issued after the waiting write waits too
    assert!(parked(o.admit(h(&["k"]), R, "get3")));
    assert!(rel(&mut o, r1).is_empty());
    let w = rel(&mut o, r2);
    assert_eq!(w.iter().map(|p| p.1).collect::<Vec<_>>(), ["set"]);
    let r3 = rel(&mut o, w[0].0);
    assert_eq!(r3.iter().map(|p| p.1).collect::<Vec<_>>(), ["get3"]);
}

#[test]
fn wide_requests_are_ordered_against_narrow_and_wide_ones() {
    let mut o = KeyOrder::default();
    let many: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let wide = go(o.admit(h(&refs), W, "set_multi"));
    assert!(parked(o.admit(h(&["k42"]), R, "get k42")));
    let free = go(o.admit(h(&["x"]), R, "get x"));
    assert!(parked(o.admit(h(&refs[50..]), R, "get_multi")));
    assert!(rel(&mut o, free).is_empty());
    let next = rel(&mut o, wide);
    assert_eq!(
        next.iter().map(|p| p.1).collect::<Vec<_>>(),
        ["get k42", "get_multi"]
    );
}

#[test]
fn a_later_request_is_never_let_past_an_earlier_waiting_one() {
    let mut o = KeyOrder::default();
    let a = go(o.admit(h(&["a"]), W, "set a"));
    let b = go(o.admit(h(&["b"]), W, "set b"));
    // needs both; then one that needs only b must wait behind it
    assert!(parked(o.admit(h(&["a", "b"]), W, "set a b")));
    assert!(parked(o.admit(h(&["b"]), W, "set b again")));
    assert!(rel(&mut o, b).is_empty()); // a b still waits for a
    let next = rel(&mut o, a);
    assert_eq!(next.iter().map(|p| p.1).collect::<Vec<_>>(), ["set a b"]);
    let last = rel(&mut o, next[0].0);
    assert_eq!(
        last.iter().map(|p| p.1).collect::<Vec<_>>(),
        ["set b again"]
    );
}

#[test]
fn requests_without_keys_and_unknown_tickets_change_nothing() {
    let mut o: KeyOrder<&str> = KeyOrder::default();
    assert!(matches!(
        o.admit(None, W, "flush"),
        Admitted::Go(u64::MAX, _)
    ));
    assert!(rel(&mut o, u64::MAX).is_empty() && o.is_empty());
    assert_eq!(key_hash(b""), 0xcbf2_9ce4_8422_2325);
}

#[test]
fn touches_to_one_expiry_run_side_by_side_with_each_other_and_with_reads() {
    let mut o = KeyOrder::default();
    let a = go(o.admit(h(&["k"]), ttl(30), "touch a"));
    let b = go(o.admit(h(&["k"]), ttl(30), "gat b"));
    let r = go(o.admit(h(&["k"]), R, "get"));
    let c = go(o.admit(h(&["k"]), ttl(30), "touch c"));
    for t in [a, b, r, c] {
        assert!(rel(&mut o, t).is_empty());
    }
    assert!(o.is_empty() && o.narrow.is_empty());
}

#[test]
fn a_touch_waits_for_an_earlier_write_and_a_later_write_waits_for_it() {
    let mut o = KeyOrder::default();
    let set = go(o.admit(h(&["k"]), W, "set"));
    assert!(parked(o.admit(h(&["k"]), ttl(30), "touch 1")));
    assert!(parked(o.admit(h(&["k"]), ttl(30), "gat 2")));
    assert!(parked(o.admit(h(&["k"]), W, "delete")));
    // a touch issued after the waiting delete waits for it too
    assert!(parked(o.admit(h(&["k"]), ttl(30), "touch 3")));
    let touches = rel(&mut o, set);
    assert_eq!(
        touches.iter().map(|p| p.1).collect::<Vec<_>>(),
        ["touch 1", "gat 2"]
    );
    assert!(rel(&mut o, touches[0].0).is_empty());
    let del = rel(&mut o, touches[1].0);
    assert_eq!(del.iter().map(|p| p.1).collect::<Vec<_>>(), ["delete"]);
    let last = rel(&mut o, del[0].0);
    assert_eq!(last.iter().map(|p| p.1).collect::<Vec<_>>(), ["touch 3"]);
}

#[test]
fn touches_to_other_expiries_keep_their_order() {
    let mut o = KeyOrder::default();
    let a = go(o.admit(h(&["k"]), ttl(30), "touch 30"));
    assert!(parked(o.admit(h(&["k"]), ttl(60), "touch 60")));
    // once two tags are registered, even the first one's waits (a wait too many, no less)
    assert!(parked(o.admit(h(&["k"]), ttl(30), "touch 30 again")));
    let next = rel(&mut o, a);
    assert_eq!(next.iter().map(|p| p.1).collect::<Vec<_>>(), ["touch 60"]);
    let last = rel(&mut o, next[0].0);
    assert_eq!(
        last.iter().map(|p| p.1).collect::<Vec<_>>(),
        ["touch 30 again"]
    );
    rel(&mut o, last[0].0);
    assert!(o.is_empty() && o.narrow.is_empty());
}

#[test]
fn wide_requests_conflict_by_access_too() {
    let mut o = KeyOrder::default();
    let many: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let gat = go(o.admit(h(&refs), ttl(30), "gat_multi"));
    go(o.admit(h(&["k7"]), ttl(30), "gat k7"));
    go(o.admit(h(&["k8"]), R, "get k8"));
    assert!(parked(o.admit(h(&["k9"]), ttl(60), "gat k9 60")));
    assert!(parked(o.admit(h(&["k10"]), W, "set k10")));
    let next = rel(&mut o, gat);
    assert_eq!(
        next.iter().map(|p| p.1).collect::<Vec<_>>(),
        ["gat k9 60", "set k10"]
    );
}

#[test]
fn many_readers_of_one_key_never_wait_and_a_write_waits_for_all_of_them() {
    let mut o = KeyOrder::default();
    let readers: Vec<u64> = (0..256)
        .map(|i| go(o.admit(h(&["hot"]), if i % 2 == 0 { R } else { ttl(10) }, "read")))
        .collect();
    assert!(parked(o.admit(h(&["hot"]), W, "set")));
    for t in &readers[..255] {
        assert!(rel(&mut o, *t).is_empty());
    }
    let set = rel(&mut o, readers[255]);
    assert_eq!(set.iter().map(|p| p.1).collect::<Vec<_>>(), ["set"]);
}
