//! netdelay: a packet holder for `make bench-net`, for kernels without `sch_netem`.
//!
//! nftables sends every packet that crosses the simulated link to NFQUEUE queue `--queue`
//! (both directions); this program receives each one's metadata (never its payload) over
//! nfnetlink, holds it for the one-way delay and then gives the kernel its verdict: accept, or
//! drop (loss, with probability `loss`). With probability `reorder`, a packet is held
//! `reorder_extra_us` longer, so the packets behind it overtake it. Packets are real kernel
//! packets: TCP sees the delay, the loss and the reordering as on a wire.
//!
//! Usage: netdelay --queue N --delay-us D [--loss P] [--reorder P] [--reorder-extra-us E]
//! [--gso 1]
//!
//! Commands on stdin, one per line, change the settings while it runs: `delay_us D`,
//! `loss P`, `reorder P`, `reorder_extra_us E`, and `stats` (prints one line of counters:
//! `packets N accepted N dropped N reordered N late_us_avg X lead_us Y`: how late accepted
//! packets left on average, and how far ahead it asks to be woken). Each command is answered
//! with one line. It exits when stdin closes, so it dies with the process that started it. No
//! dependency: the few libc calls are declared here.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::time::Instant;

#[repr(C)]
struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

#[repr(C)]
struct SockaddrNl {
    nl_family: u16,
    nl_pad: u16,
    nl_pid: u32,
    nl_groups: u32,
}

extern "C" {
    fn socket(domain: i32, ty: i32, protocol: i32) -> i32;
    fn bind(fd: i32, addr: *const SockaddrNl, len: u32) -> i32;
    fn setsockopt(fd: i32, level: i32, name: i32, val: *const i32, len: u32) -> i32;
    fn sendto(
        fd: i32,
        buf: *const u8,
        len: usize,
        flags: i32,
        addr: *const SockaddrNl,
        alen: u32,
    ) -> isize;
    fn recv(fd: i32, buf: *mut u8, len: usize, flags: i32) -> isize;
    fn read(fd: i32, buf: *mut u8, len: usize) -> isize;
    fn ppoll(fds: *mut PollFd, n: u64, tmo: *const Timespec, mask: *const u8) -> i32;
    fn prctl(option: i32, arg: u64, a3: u64, a4: u64, a5: u64) -> i32;
    fn __errno_location() -> *mut i32;
}

const AF_NETLINK: i32 = 16;
const SOCK_RAW: i32 = 3;
const NETLINK_NETFILTER: i32 = 12;
const SOL_SOCKET: i32 = 1;
const SO_RCVBUFFORCE: i32 = 33;
const SOL_NETLINK: i32 = 270;
const NETLINK_NO_ENOBUFS: i32 = 5;
const MSG_DONTWAIT: i32 = 0x40;
const POLLIN: i16 = 1;
const PR_SET_TIMERSLACK: i32 = 29;
const EAGAIN: i32 = 11;
const EINTR: i32 = 4;

const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_ERROR: u16 = 2;
const NFQNL_MSG_PACKET: u16 = 3 << 8;
const NFQNL_MSG_VERDICT: u16 = (3 << 8) | 1;
const NFQNL_MSG_CONFIG: u16 = (3 << 8) | 2;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQA_CFG_F_GSO: u32 = 1 << 2;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_META: u8 = 1;
const NF_DROP: u32 = 0;
const NF_ACCEPT: u32 = 1;

fn errno() -> i32 {
    unsafe { *__errno_location() }
}

fn die(what: &str) -> ! {
    eprintln!("netdelay: {what} (errno {})", errno());
    std::process::exit(1);
}

/// Settings that stdin can change.
struct Settings {
    delay_ns: u64,
    loss: f64,
    reorder: f64,
    reorder_extra_ns: u64,
}

impl Settings {
    fn apply(&mut self, key: &str, value: &str) -> Result<(), String> {
        let num = |v: &str| v.parse::<f64>().map_err(|e| format!("{key} {v}: {e}"));
        match key {
            "delay_us" | "--delay-us" => self.delay_ns = (num(value)? * 1e3) as u64,
            "loss" | "--loss" => self.loss = num(value)?,
            "reorder" | "--reorder" => self.reorder = num(value)?,
            "reorder_extra_us" | "--reorder-extra-us" => {
                self.reorder_extra_ns = (num(value)? * 1e3) as u64
            }
            _ => return Err(format!("unknown setting {key}")),
        }
        Ok(())
    }
}

/// xorshift64*: loss and reordering need a cheap coin, not a good one.
struct Rng(u64);

impl Rng {
    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((x >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

fn nlmsg(buf: &mut Vec<u8>, ty: u16, flags: u16, queue: u16, attrs: &[(u16, &[u8])]) {
    let start = buf.len();
    buf.extend_from_slice(&[0; 16]); // nlmsghdr, length filled in below
    buf.extend_from_slice(&[0, 0]); // nfgenmsg: AF_UNSPEC, NFNETLINK_V0
    buf.extend_from_slice(&queue.to_be_bytes());
    for (ty, payload) in attrs {
        let len = 4 + payload.len();
        buf.extend_from_slice(&(len as u16).to_ne_bytes());
        buf.extend_from_slice(&ty.to_ne_bytes());
        buf.extend_from_slice(payload);
        buf.resize(buf.len() + ((4 - len % 4) % 4), 0);
    }
    let len = (buf.len() - start) as u32;
    buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    buf[start + 4..start + 6].copy_from_slice(&ty.to_ne_bytes());
    buf[start + 6..start + 8].copy_from_slice(&flags.to_ne_bytes());
}

fn send(fd: i32, buf: &[u8]) {
    let kernel = SockaddrNl {
        nl_family: AF_NETLINK as u16,
        nl_pad: 0,
        nl_pid: 0,
        nl_groups: 0,
    };
    let n = unsafe {
        sendto(
            fd,
            buf.as_ptr(),
            buf.len(),
            0,
            &kernel,
            std::mem::size_of::<SockaddrNl>() as u32,
        )
    };
    if n < 0 {
        die("sendto");
    }
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_ne_bytes([b[i], b[i + 1]])
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// The packet ids in one datagram from the kernel (a batch of NFQNL_MSG_PACKET messages).
fn packet_ids(b: &[u8], out: &mut Vec<u32>) {
    let mut off = 0;
    while off + 16 <= b.len() {
        let len = u32_at(b, off) as usize;
        if len < 16 || off + len > b.len() {
            break;
        }
        let ty = u16_at(b, off + 4);
        if ty == NLMSG_ERROR {
            let err = i32::from_ne_bytes(b[off + 16..off + 20].try_into().unwrap_or([0; 4]));
            if err != 0 {
                eprintln!("netdelay: netlink error {err}");
            }
        } else if ty == NFQNL_MSG_PACKET {
            let mut a = off + 20;
            while a + 4 <= off + len {
                let alen = u16_at(b, a) as usize;
                if alen < 4 {
                    break;
                }
                if u16_at(b, a + 2) & 0x7fff == NFQA_PACKET_HDR && alen >= 8 {
                    out.push(u32::from_be_bytes([b[a + 4], b[a + 5], b[a + 6], b[a + 7]]));
                }
                a += (alen + 3) & !3;
            }
        }
        off += (len + 3) & !3;
    }
}

fn open_queue(queue: u16, gso: bool) -> i32 {
    let fd = unsafe { socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER) };
    if fd < 0 {
        die("socket(AF_NETLINK, NETLINK_NETFILTER)");
    }
    let local = SockaddrNl {
        nl_family: AF_NETLINK as u16,
        nl_pad: 0,
        nl_pid: 0,
        nl_groups: 0,
    };
    if unsafe { bind(fd, &local, std::mem::size_of::<SockaddrNl>() as u32) } < 0 {
        die("bind");
    }
    let big: i32 = 16 << 20;
    let one: i32 = 1;
    unsafe {
        setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, 4);
        setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, 4);
    }
    let mut msg = Vec::new();
    let cmd = [NFQNL_CFG_CMD_BIND, 0, 0, 0];
    let mut params = 0u32.to_be_bytes().to_vec(); // copy_range: no payload
    params.push(NFQNL_COPY_META);
    let maxlen = 65536u32.to_be_bytes();
    // With `gso`, a segmentation-offload packet is queued whole instead of cut into MTU-sized
    // packets first (the kernel cuts it after the verdict): one verdict per write of a large
    // reply. Loss then drops a whole write, so the loss runs keep it off.
    let flags = if gso { NFQA_CFG_F_GSO } else { 0 }.to_be_bytes();
    let mask = NFQA_CFG_F_GSO.to_be_bytes();
    let attrs: [(u16, &[u8]); 5] = [
        (NFQA_CFG_CMD, &cmd),
        (NFQA_CFG_PARAMS, &params),
        (NFQA_CFG_QUEUE_MAXLEN, &maxlen),
        (NFQA_CFG_MASK, &mask),
        (NFQA_CFG_FLAGS, &flags),
    ];
    nlmsg(
        &mut msg,
        NFQNL_MSG_CONFIG,
        NLM_F_REQUEST | NLM_F_ACK,
        queue,
        &attrs,
    );
    send(fd, &msg);
    let mut buf = vec![0u8; 8192];
    let n = unsafe { recv(fd, buf.as_mut_ptr(), buf.len(), 0) };
    if n < 20 || u16_at(&buf, 4) != NLMSG_ERROR {
        die("no answer to the queue's configuration");
    }
    let err = i32::from_ne_bytes(buf[16..20].try_into().unwrap_or([0; 4]));
    if err != 0 {
        eprintln!("netdelay: binding queue {queue} failed: error {err}");
        std::process::exit(1);
    }
    fd
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut queue: u16 = 0;
    let mut gso = false;
    let mut s = Settings {
        delay_ns: 0,
        loss: 0.0,
        reorder: 0.0,
        reorder_extra_ns: 0,
    };
    for pair in args.chunks(2) {
        let (k, v) = (
            pair[0].as_str(),
            pair.get(1).map(String::as_str).unwrap_or(""),
        );
        if k == "--queue" {
            queue = v.parse().unwrap_or_else(|_| die("--queue takes a number"));
        } else if k == "--gso" {
            gso = v == "1";
        } else if let Err(e) = s.apply(k, v) {
            eprintln!("netdelay: {e}");
            std::process::exit(2);
        }
    }
    unsafe { prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0) }; // wake up on time, not 50 µs late
    let fd = open_queue(queue, gso);
    let t0 = Instant::now();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (std::process::id() as u64) << 17);
    // Held packets: (due, arrival order, id, verdict), earliest first.
    let mut held: BinaryHeap<Reverse<(u64, u64, u32, u32)>> = BinaryHeap::new();
    let (mut seq, mut accepted, mut dropped, mut reordered) = (0u64, 0u64, 0u64, 0u64);
    let mut rbuf = vec![0u8; 1 << 20];
    let mut ids = Vec::new();
    let mut out = Vec::new();
    // How late packets leave (the sum, for `stats`), and how far ahead of a packet's due time
    // to ask for the wake-up: a running average of how much ppoll oversleeps (on a VM, tens of
    // microseconds and more when the vCPU was idle). Woken early, it polls without sleeping
    // until the packet is due, so no packet leaves early.
    let (mut late_ns, mut lead_ns) = (0u64, 0u64);
    let mut line = Vec::new();
    loop {
        let now = t0.elapsed().as_nanos() as u64;
        // Release what is due, all verdicts in one datagram.
        out.clear();
        while let Some(Reverse((due, _, id, verdict))) = held.peek().copied() {
            if due > now {
                break;
            }
            held.pop();
            if verdict == NF_ACCEPT {
                late_ns += now - due;
            }
            let hdr = [verdict.to_be_bytes(), id.to_be_bytes()].concat();
            nlmsg(
                &mut out,
                NFQNL_MSG_VERDICT,
                NLM_F_REQUEST,
                queue,
                &[(NFQA_VERDICT_HDR, &hdr)],
            );
            if out.len() > 60_000 {
                send(fd, &out);
                out.clear();
            }
        }
        if !out.is_empty() {
            send(fd, &out);
        }
        let tmo = held
            .peek()
            .map(|Reverse(h)| h.0.saturating_sub(now).saturating_sub(lead_ns));
        let ts = tmo.map(|ns| Timespec {
            tv_sec: (ns / 1_000_000_000) as i64,
            tv_nsec: (ns % 1_000_000_000) as i64,
        });
        let mut fds = [
            PollFd {
                fd,
                events: POLLIN,
                revents: 0,
            },
            PollFd {
                fd: 0,
                events: POLLIN,
                revents: 0,
            },
        ];
        let tp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const Timespec);
        let r = unsafe { ppoll(fds.as_mut_ptr(), 2, tp, std::ptr::null()) };
        if r < 0 && errno() != EINTR {
            die("ppoll");
        }
        if let (0, Some(asked)) = (r, tmo) {
            if asked > 0 {
                let over = (t0.elapsed().as_nanos() as u64).saturating_sub(now + asked);
                lead_ns = (lead_ns * 7 + over.min(500_000)) / 8;
            }
        }
        if fds[0].revents != 0 {
            loop {
                let n = unsafe { recv(fd, rbuf.as_mut_ptr(), rbuf.len(), MSG_DONTWAIT) };
                if n < 0 {
                    let e = errno();
                    if e == EAGAIN || e == EINTR {
                        break;
                    }
                    die("recv");
                }
                ids.clear();
                packet_ids(&rbuf[..n as usize], &mut ids);
                let arrived = t0.elapsed().as_nanos() as u64;
                for &id in &ids {
                    seq += 1;
                    let mut due = arrived + s.delay_ns;
                    let verdict = if rng.chance(s.loss) {
                        dropped += 1;
                        due = arrived; // a lost packet is gone at once
                        NF_DROP
                    } else {
                        accepted += 1;
                        if rng.chance(s.reorder) {
                            reordered += 1;
                            due += s.reorder_extra_ns;
                        }
                        NF_ACCEPT
                    };
                    held.push(Reverse((due, seq, id, verdict)));
                }
            }
        }
        if fds[1].revents != 0 {
            let mut chunk = [0u8; 4096];
            let n = unsafe { read(0, chunk.as_mut_ptr(), chunk.len()) };
            if n <= 0 {
                std::process::exit(0); // whoever started it is gone
            }
            line.extend_from_slice(&chunk[..n as usize]);
            while let Some(pos) = line.iter().position(|&c| c == b'\n') {
                let cmd: Vec<u8> = line.drain(..=pos).collect();
                let cmd = String::from_utf8_lossy(&cmd);
                let words: Vec<&str> = cmd.split_whitespace().collect();
                let reply = match words.as_slice() {
                    ["stats"] => format!(
                        "packets {seq} accepted {accepted} dropped {dropped} reordered {reordered} \
                         late_us_avg {:.1} lead_us {:.1}",
                        late_ns as f64 / 1e3 / accepted.max(1) as f64,
                        lead_ns as f64 / 1e3
                    ),
                    [k, v] => match s.apply(k, v) {
                        Ok(()) => format!("ok {k} {v}"),
                        Err(e) => format!("error {e}"),
                    },
                    [] => continue,
                    _ => format!("error: cannot read {cmd:?}"),
                };
                let mut o = std::io::stdout().lock();
                let _ = writeln!(o, "{reply}");
                let _ = o.flush();
            }
        }
    }
}
