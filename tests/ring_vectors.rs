//! The shared pylibmc vectors through the pure ring: every configuration, including the two
//! with a server ejected (auto-eject rebuilds the ring over the live servers).
// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fastmc::ring::hash::HashKind;
use fastmc::ring::{Distribution, Ring, RingServer, RingSettings};

fn parse(spec: &str) -> RingServer {
    if spec.starts_with('/') {
        return RingServer {
            host: spec.into(),
            port: 0,
            weight: 1,
        };
    }
    let (host, rest) = if let Some(r) = spec.strip_prefix('[') {
        let end = r.find(']').expect("bracket");
        (
            r[..end].to_string(),
            r[end + 1..].trim_start_matches(':').to_string(),
        )
    } else {
        match spec.split_once(':') {
            Some((h, r)) => (h.to_string(), r.to_string()),
            None => (spec.to_string(), String::new()),
        }
    };
    let mut parts = rest.split(':').filter(|p| !p.is_empty());
    let port = parts.next().map_or(11211, |p| p.parse().expect("port"));
    let weight = parts.next().map_or(1, |w| w.parse().expect("weight"));
    RingServer { host, port, weight }
}

fn by_name<T: Copy>(all: impl Iterator<Item = T>, name: &str, f: impl Fn(T) -> &'static str) -> T {
    all.into_iter()
        .find(|&x| f(x) == name)
        .unwrap_or_else(|| panic!("unknown {name}"))
}

#[test]
fn every_vector_configuration_places_every_key() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/distribution_vectors.json"
    );
    let data: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("vectors")).expect("json");
    let keys: Vec<Vec<u8>> = data["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| {
            let hex = k["hex"].as_str().expect("hex");
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect()
        })
        .collect();
    let mut bad = Vec::new();
    let mut checked = 0;
    for cfg in data["configs"].as_array().expect("configs") {
        let eff = &cfg["effective"];
        let key_hash = by_name(
            (0..10).filter_map(HashKind::from_code),
            eff["key_hash"].as_str().expect("h"),
            HashKind::name,
        );
        let settings = RingSettings {
            distribution: by_name(
                (0..8).filter_map(Distribution::from_code),
                eff["distribution"].as_str().expect("d"),
                Distribution::name,
            ),
            key_hash,
            // Every vector client was built with its behaviors: its ring used the key hash.
            point_hash: key_hash,
            weighted: eff["weighted"].as_bool().expect("w"),
            sort_hosts: eff["sort_hosts"].as_bool().expect("s"),
            sorted: eff["sort_hosts"].as_bool().expect("s"),
        };
        let servers: Vec<RingServer> = cfg["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .map(|s| parse(s.as_str().expect("str")))
            .collect();
        let mut live = vec![true; servers.len()];
        if let Some(i) = cfg["ejected_index"].as_u64() {
            live[i as usize] = false;
        }
        let ring = Ring::build(&settings, &servers, &live);
        let ns = eff["namespace"].as_str().unwrap_or("").as_bytes().to_vec();
        let with_ns = eff["hash_with_namespace"].as_bool().unwrap_or(false);
        let mut wrong = 0;
        for (key, want) in keys
            .iter()
            .zip(cfg["expected"].as_array().expect("expected"))
        {
            let Some(want) = want.as_u64() else { continue };
            let k = if with_ns {
                [ns.as_slice(), key].concat()
            } else {
                key.clone()
            };
            checked += 1;
            if ring.server_for(&k) as u64 != want {
                wrong += 1;
            }
        }
        if wrong > 0 {
            bad.push(format!("{}: {wrong}", cfg["name"]));
        }
    }
    assert!(bad.is_empty(), "mismatches: {bad:?}");
    assert!(checked > 59 * 300, "only {checked} placements checked");
}
