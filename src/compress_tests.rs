//! Unit tests of `compress`: round trips, the bound, corrupted frames and dictionaries.

use super::*;

fn sample(i: usize) -> Vec<u8> {
    format!(
        "{{\"id\": {i}, \"name\": \"user {i}\", \"email\": \"user{i}@example.com\", \
         \"roles\": [\"reader\", \"writer\"], \"active\": {}, \"score\": {}}}",
        i % 3 == 0,
        i * 7 % 101
    )
    .into_bytes()
}

fn dict() -> Vec<u8> {
    let samples: Vec<Vec<u8>> = (0..400).map(sample).collect();
    let refs: Vec<&[u8]> = samples.iter().map(Vec::as_slice).collect();
    train(&refs, 4096).unwrap()
}

/// A frame as a streaming compressor writes it: no declared content size.
fn unsized_frame(data: &[u8]) -> Vec<u8> {
    let mut cctx = CCtx::create();
    cctx.set_parameter(CParameter::ContentSizeFlag(false))
        .unwrap();
    let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
    cctx.compress2(&mut out, data).unwrap();
    assert!(matches!(zstd_safe::get_frame_content_size(&out), Ok(None)));
    out
}

#[test]
fn round_trips_at_every_level_and_skips_what_does_not_shrink() {
    let data = b"hello hello hello hello hello hello hello hello".repeat(50);
    for level in [-7, 1, 3, 19, 22] {
        let z = Zstd::new(level, None).unwrap();
        let c = z.compress(&data).unwrap().unwrap();
        assert!(c.len() < data.len());
        assert_eq!(decompress(&c, data.len(), None).unwrap(), data);
    }
    let z = Zstd::new(3, None).unwrap();
    assert_eq!(z.compress(b"abc").unwrap(), None);
    assert!(Zstd::new(23, None).is_err() && Zstd::new(-8, None).is_err());
}

#[test]
fn the_bound_is_exact_and_a_declared_size_past_it_is_refused_at_once() {
    let data = vec![0u8; 1 << 20];
    let c = Zstd::new(3, None)
        .unwrap()
        .compress(&data)
        .unwrap()
        .unwrap();
    assert!(c.len() < 100, "{}", c.len());
    assert_eq!(decompress(&c, 1 << 20, None).unwrap().len(), 1 << 20);
    assert_eq!(
        decompress(&c, (1 << 20) - 1, None),
        Err(Failure::TooLarge {
            declared: Some(1 << 20)
        })
    );
}

#[test]
fn frames_without_a_size_stream_up_to_the_bound_and_no_further() {
    let data = b"0123456789abcdef".repeat(40_000); // 640,000 bytes
    let frame = unsized_frame(&data);
    assert_eq!(decompress(&frame, data.len(), None).unwrap(), data);
    assert_eq!(decompress(&frame, usize::MAX, None).unwrap(), data);
    assert_eq!(
        decompress(&frame, data.len() - 1, None),
        Err(Failure::TooLarge { declared: None })
    );
    assert_eq!(
        decompress(&frame, 1000, None),
        Err(Failure::TooLarge { declared: None })
    );
    // two frames, one unsized: both decoded, in order
    let mut two = Zstd::new(1, None)
        .unwrap()
        .compress(&data)
        .unwrap()
        .unwrap();
    two.extend_from_slice(&frame);
    let out = decompress(&two, usize::MAX, None).unwrap();
    assert_eq!(out.len(), 2 * data.len());
    assert_eq!(&out[data.len()..], &data[..]);
}

#[test]
fn the_window_a_frame_may_ask_for_follows_the_bound() {
    assert_eq!(window_log_max(64 << 20), 26);
    assert_eq!(window_log_max((64 << 20) + 1), 27);
    assert_eq!(window_log_max(0), 23);
    assert_eq!(window_log_max(1000), 23);
    assert_eq!(window_log_max(usize::MAX), 31);
    // a frame asking for a 128 MiB window (streamed: the compressor never knew the size)
    let mut cctx = CCtx::create();
    cctx.set_parameter(CParameter::WindowLog(27)).unwrap();
    let data = vec![7u8; 1 << 20];
    let mut frame = vec![0u8; 1 << 16];
    let mut output = OutBuffer::around(&mut frame[..]);
    let mut input = InBuffer::around(&data);
    cctx.compress_stream2(
        &mut output,
        &mut input,
        zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_continue,
    )
    .unwrap();
    while cctx
        .compress_stream2(
            &mut output,
            &mut input,
            zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_end,
        )
        .unwrap()
        != 0
    {}
    let n = output.pos();
    let frame = &frame[..n];
    assert_eq!(decompress(frame, 64 << 20, None), Err(Failure::Window));
    let out = decompress(frame, 128 << 20, None).map(|v| v == data);
    assert_eq!(out, Ok(true));
}

#[test]
fn corrupted_truncated_and_foreign_bytes_are_errors() {
    let data = sample(1).repeat(20);
    let c = Zstd::new(3, None)
        .unwrap()
        .compress(&data)
        .unwrap()
        .unwrap();
    for cut in [1, 4, c.len() / 2, c.len() - 1] {
        assert!(
            matches!(
                decompress(&c[..cut], 1 << 20, None),
                Err(Failure::Corrupt(_))
            ),
            "cut at {cut}"
        );
    }
    // every single flipped byte past the magic is an error or (never) other bytes
    for i in 4..c.len() {
        let mut bad = c.clone();
        bad[i] ^= 0x20;
        match decompress(&bad, 1 << 20, None) {
            Ok(out) => assert_eq!(out, data, "byte {i}"),
            Err(Failure::Corrupt(_) | Failure::TooLarge { .. } | Failure::Dictionary { .. }) => {}
            Err(e) => panic!("byte {i}: {e:?}"),
        }
    }
    assert!(matches!(
        decompress(b"", 10, None),
        Err(Failure::Corrupt(_))
    ));
    assert!(matches!(
        decompress(b"x\x9c not zstd", 10, None),
        Err(Failure::Corrupt(_))
    ));
    let streamed = unsized_frame(&data);
    assert!(matches!(
        decompress(&streamed[..streamed.len() - 3], 1 << 20, None),
        Err(Failure::Corrupt(_))
    ));
}

#[test]
fn a_dictionary_is_named_by_its_frames_and_needed_to_read_them() {
    let d = dict();
    let z = Zstd::new(3, Some(&d)).unwrap();
    let id = z.dictionary().unwrap().id();
    let v = sample(5000);
    let with = z.compress(&v).unwrap().unwrap();
    let without = Zstd::new(3, None).unwrap().compress(&v.repeat(3)).unwrap();
    assert!(with.len() * 2 < v.len(), "{} of {}", with.len(), v.len());
    assert_eq!(decompress(&with, 1 << 20, z.dictionary()).unwrap(), v);
    assert_eq!(
        decompress(&with, 1 << 20, None),
        Err(Failure::Dictionary {
            needed: id,
            have: None
        })
    );
    let other_samples: Vec<Vec<u8>> = (0..400)
        .map(|i| format!("<li class=\"item-{i}\"><a href=\"/p/{i}\">{i}</a></li>").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = other_samples.iter().map(Vec::as_slice).collect();
    let other = Zstd::new(3, Some(&train(&refs, 4096).unwrap())).unwrap();
    let other_id = other.dictionary().unwrap().id();
    assert_ne!(id, other_id);
    assert_eq!(
        decompress(&with, 1 << 20, other.dictionary()),
        Err(Failure::Dictionary {
            needed: id,
            have: Some(other_id)
        })
    );
    // a value compressed without a dictionary reads the same with or without one
    if let Some(plain) = without {
        assert_eq!(
            decompress(&plain, 1 << 20, z.dictionary()).unwrap(),
            v.repeat(3)
        );
    }
    // a dictionary with its ID: raw bytes are refused
    assert!(Zstd::new(3, Some(b"just some bytes")).is_err());
}
