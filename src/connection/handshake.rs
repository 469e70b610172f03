//! What a new connection does before its first request: the TLS handshake, and SASL PLAIN
//! authentication over the binary protocol. The one place where the connection layer speaks
//! protocol. Depends on `error`, `security` and `protocol::binary` (its SASL encoder).

use std::io::{self, Write};

use super::connect::{Address, SocketOptions, Stream};
use super::{io_kind_is_timeout, Connection};
use crate::error::{Error, Result};
use crate::protocol::{binary, Parsed};
use crate::security::Credentials;

/// The TLS handshake, when the options ask for TLS: blocking, within the socket's timeouts.
pub(super) fn tls(
    stream: &mut Stream,
    addr: &Address,
    opts: &SocketOptions,
) -> Result<Option<Box<rustls::ClientConnection>>> {
    let Some(t) = &opts.security.tls else {
        return Ok(None);
    };
    let host = match addr {
        Address::Tcp { host, .. } if !host.is_empty() => host.as_str(),
        _ => "localhost",
    };
    let name = t.server_name_for(host).map_err(Error::Connect)?;
    let mut session = rustls::ClientConnection::new(t.config(), name)
        .map_err(|e| Error::Connect(format!("TLS: {e}")))?;
    while session.is_handshaking() {
        session.complete_io(stream).map_err(|e| {
            Error::Connect(format!(
                "TLS handshake with {} failed: {e}",
                addr.display_name()
            ))
        })?;
    }
    Ok(Some(Box::new(session)))
}

/// The largest SASL answer read (memcached's is a word or two).
const MAX_SASL_ANSWER: usize = 4096;

impl Connection {
    /// SASL PLAIN over the binary protocol; nothing else is sent until the server says yes.
    pub(super) fn authenticate(&mut self, c: &Credentials) -> Result<()> {
        let mut buf = Vec::new();
        binary::encode_sasl_plain(&mut buf, &c.username, &c.password);
        self.write_all_blocking(&buf)?;
        loop {
            if let Parsed::Done(r, used) = binary::parse_response(self.unread())? {
                let outcome = binary::sasl_outcome(&r);
                self.consume(used);
                if outcome.is_ok() && !self.is_idle_clean() {
                    return Err(Error::Protocol("data after the SASL answer".into()));
                }
                return outcome;
            }
            // A SASL answer is a few bytes: the read buffer does not grow for one.
            if matches!(binary::announced(self.unread()), Some((n, _)) if n > MAX_SASL_ANSWER) {
                return Err(Error::Protocol("SASL answer too large".into()));
            }
            self.recv_blocking()?;
        }
    }

    /// Write everything, blocking up to the socket's write timeout.
    pub(crate) fn write_all_blocking(&mut self, data: &[u8]) -> Result<()> {
        let werr = |e: io::Error| {
            if io_kind_is_timeout(&e) {
                Error::Timeout
            } else {
                Error::write(&e)
            }
        };
        match &mut self.tls {
            Some(tls) => {
                tls.writer().write_all(data).map_err(werr)?;
                while tls.wants_write() {
                    tls.write_tls(&mut self.stream).map_err(werr)?;
                }
                Ok(())
            }
            None => {
                self.push_held_writes();
                self.stream.write_all(data).map_err(werr)
            }
        }
    }
}
