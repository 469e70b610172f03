//! Golden values for the hashes and rings (more in tests/ring_vectors.rs).
use super::hash::HASH_KINDS;
use super::*;

#[test]
fn hello_values() {
    let want = [
        (HashKind::Default, 0xc8fd181b),
        (HashKind::Md5, 0x2a40415d),
        (HashKind::Crc, 0x3610),
        (HashKind::Fnv1_64, 0xbdbdd4c7),
        (HashKind::Fnv1a_64, 0x80aabd0b),
        (HashKind::Fnv1_32, 0xb6fa7167),
        (HashKind::Fnv1a_32, 0x4f9f2cab),
        (HashKind::Murmur, 0x521b0bff),
        (HashKind::Jenkins, 0x2e0cc8f3),
    ];
    for (k, v) in want {
        assert_eq!(hash(k, b"hello"), v, "{k:?}");
    }
    assert_eq!(hash(HashKind::Default, "café".as_bytes()), 0xd99c709e);
    assert_eq!(hash(HashKind::Jenkins, b""), 0xdeadbefc);
}

fn srv(host: &str, port: u16, weight: u32) -> RingServer {
    RingServer {
        host: host.into(),
        port,
        weight,
    }
}

#[test]
fn worked_examples() {
    let servers = [srv("10.0.0.1", 11211, 1), srv("10.0.0.2", 11212, 1)];
    let mut s = RingSettings::default();
    s.set_ketama(true);
    let r = Ring::build(&s, &servers, &[true, true]);
    assert_eq!(hash(HashKind::Default, b"10.0.0.1-0"), 0xf618fafa);
    assert_eq!(r.points_per_server(), vec![100, 100]);
    assert_eq!(r.server_for(b"foo"), 1);
    let mut w = RingSettings::default();
    w.set_ketama_weighted(true);
    let r = Ring::build(&w, &servers, &[true, true]);
    assert_eq!(r.points_per_server(), vec![160, 160]);
    assert_eq!(r.server_for(b"foo"), 0);
}

#[test]
fn float32_point_counts() {
    assert_eq!(weighted_points(1, 25, 25), 156);
    let w = [1, 3, 7, 7, 7];
    let got: Vec<u32> = w.iter().map(|&x| weighted_points(x, 25, 5)).collect();
    assert_eq!(got, vec![28, 92, 224, 224, 224]);
}

#[test]
fn no_panic_on_edges() {
    let r = Ring::build(&RingSettings::default(), &[], &[]);
    assert_eq!(r.server_for(b""), 0);
    let mut s = RingSettings::default();
    s.set_ketama(true);
    let servers = [srv("a", 1, 1), srv("b", 2, 1)];
    let r = Ring::build(&s, &servers, &[false, false]);
    assert_eq!(r.server_for(b"x"), 0);
    for k in HASH_KINDS {
        let _ = hash(k, b"");
        let _ = hash(k, &[0xff; 13]);
    }
}

#[test]
fn a_hash_set_later_keeps_the_points_until_a_rebuild() {
    let servers = [srv("10.0.0.1", 11211, 1), srv("10.0.0.2", 11212, 1)];
    let mut s = RingSettings::default();
    s.set_ketama(true);
    let before = Ring::build(&s, &servers, &[true, true]);
    s.set_hash(HashKind::Crc);
    assert_eq!(s.point_hash, HashKind::Default);
    let stale = Ring::build(&s, &servers, &[true, true]);
    assert_eq!(stale.continuum, before.continuum);
    s.set_distribution(Distribution::Consistent);
    assert_eq!(s.point_hash, HashKind::Crc);
    assert_ne!(
        Ring::build(&s, &servers, &[true, true]).continuum,
        before.continuum
    );
}

#[test]
fn a_sorted_list_stays_sorted_when_sort_hosts_is_turned_off() {
    let servers = [srv("c", 11211, 1), srv("a", 11211, 1), srv("b", 11211, 1)];
    let mut s = RingSettings::default();
    s.set_sort_hosts(true);
    let sorted = Ring::build(&s, &servers, &[true; 3]);
    assert_eq!(sorted.order, vec![1, 2, 0]);
    s.set_sort_hosts(false);
    assert_eq!(Ring::build(&s, &servers, &[true; 3]).order, sorted.order);
    assert_eq!(
        Ring::build(&RingSettings::default(), &servers, &[true; 3]).order,
        vec![0, 1, 2]
    );
}

#[test]
fn successors_follow_libmemcacheds_list_and_wrap() {
    let servers = [srv("c", 1, 1), srv("a", 1, 1), srv("b", 1, 1)];
    let mut s = RingSettings::default();
    let r = Ring::build(&s, &servers, &[true; 3]);
    assert_eq!(r.successor(0, 1), 1);
    assert_eq!(r.successor(2, 1), 0);
    assert_eq!(r.successor(1, 2), 0);
    assert_eq!(r.successor(1, 3), 1);
    // sorted: a (1), b (2), c (0)
    s.set_sort_hosts(true);
    let r = Ring::build(&s, &servers, &[true; 3]);
    assert_eq!(r.successor(1, 1), 2);
    assert_eq!(r.successor(2, 1), 0);
    assert_eq!(r.successor(0, 1), 1);
    assert_eq!(r.successor(0, 5), 2);
}

#[test]
fn servers_for_a_batch_are_each_keys_server() {
    // Keys of every length up to the limit and past it, of unequal lengths side by side, with
    // bytes over 0x7f (libhashkit sign-extends them): the four-at-a-time hash must agree.
    let keys: Vec<Vec<u8>> = (0..600usize)
        .map(|i| {
            let len = (i * 37 + i / 7) % 260;
            (0..len).map(|j| (i * 131 + j * 29) as u8).collect()
        })
        .collect();
    let keys: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    let servers = [
        srv("c", 11211, 1),
        srv("a", 11212, 3),
        srv("b", 11213, 1),
        srv("d", 11214, 2),
        srv("e", 11215, 1),
    ];
    let mut checked = 0;
    for d in DISTRIBUTIONS {
        for n in [1, 2, 3, 5] {
            for k in [HashKind::Default, HashKind::Md5] {
                let mut s = RingSettings::default();
                s.set_distribution(d);
                s.set_hash(k);
                let r = Ring::build(&s, &servers[..n], &[true; 5][..n]);
                for len in [0, 1, 3, 4, 5, 599, 600] {
                    let got = r.servers_for(&keys[..len], |k| *k);
                    if d == Distribution::Random {
                        assert!(got.iter().all(|&s| usize::from(s) < n));
                        continue;
                    }
                    let want: Vec<u16> =
                        keys[..len].iter().map(|k| r.server_for(k) as u16).collect();
                    assert_eq!(got, want, "{d:?} {k:?} {n} servers, {len} keys");
                    checked += len;
                }
            }
        }
    }
    assert!(checked > 10_000);
}

#[test]
fn the_four_key_hash_is_the_one_key_hash() {
    let keys: [&[u8]; 4] = [b"hello", b"", "caf\u{e9}".as_bytes(), &[0xff; 250]];
    assert_eq!(
        hash::one_at_a_time_x4(keys),
        keys.map(|k| hash(HashKind::Default, k))
    );
    assert_eq!(hash::one_at_a_time_x4(keys)[0], 0xc8fd181b);
}
