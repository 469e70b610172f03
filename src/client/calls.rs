//! The blocking client's operation methods, one line each: an operation of `op` and its
//! arguments, run by `Operation::call` (the binding's methods call these), and the `noreply`
//! writes that never block (`store_now`, `delete_now`: `drive::noreply`).
//!
//! Uses `op` and `drive`.

use super::op::admin::{Flush, Stats};
use super::op::arith::{Arith, Create};
use super::op::delete::Delete;
use super::op::get::Get;
use super::op::meta::{Meta, MetaVerb};
use super::op::store::Store;
use super::op::touch::Touch;
use super::op::{Args, Operation};
use crate::client::drive::noreply::Quick;
use crate::client::fetched::Fetched;
use crate::client::results::MetaOutcome;
use crate::client::results::Stats as ServerStats;
use crate::client::results::StoreStatus;
use crate::client::Client;
use crate::connection::connect::Address;
use crate::error::Result;
use crate::protocol::{StoreCmd, StoreItem};

impl Client {
    /// Fetch keys (`gets` when `with_cas`). Duplicates should be removed by the caller.
    pub fn get_multi(&self, keys: &[&[u8]], with_cas: bool) -> Fetched {
        let op = Get {
            cas: with_cas,
            touch: None,
        };
        op.call(self, Args::keys(keys))
    }

    /// Fetch keys and set the expiry of those found to `exptime`, in the same round trip
    /// (`gat`/`gats`, binary GATKQ). A server without the command (it answers `ERROR`) fails
    /// its keys with `NotSupported`.
    pub fn gat_multi(&self, keys: &[&[u8]], exptime: u32) -> Fetched {
        let op = Get {
            cas: false,
            touch: Some(exptime),
        };
        op.call(self, Args::keys(keys))
    }

    /// Storage commands, pipelined. With `noreply` the server answers nothing per key and one
    /// `version` round trip closes the batch, so no stray reply can ever be read later.
    pub fn store_multi(
        &self,
        cmd: StoreCmd,
        items: &[StoreItem<'_>],
        noreply: bool,
    ) -> Vec<Result<StoreStatus>> {
        Store { cmd, noreply }.call(self, Args::items(items))
    }

    /// One storage command: `store_multi` of one item.
    pub fn store_one(
        &self,
        cmd: StoreCmd,
        item: &StoreItem<'_>,
        noreply: bool,
    ) -> Option<Result<StoreStatus>> {
        let op = Store { cmd, noreply };
        self.call_forgetting_one(&op, Args::items(std::slice::from_ref(item)))
    }

    /// A `noreply` `store_multi` of one item as far as it goes without blocking (see
    /// `forget_start`): sent on an idle connection.
    pub fn store_now(&self, cmd: StoreCmd, item: &StoreItem<'_>) -> Quick<StoreStatus> {
        let op = Store { cmd, noreply: true };
        self.forget_now(&op, Args::items(std::slice::from_ref(item)))
    }

    /// Deletes, pipelined: `true` if deleted, `false` if not found.
    pub fn delete_multi(&self, keys: &[&[u8]], noreply: bool) -> Vec<Result<bool>> {
        Delete { noreply }.call(self, Args::keys(keys))
    }

    /// One delete: `delete_multi` of one key.
    pub fn delete_one(&self, key: &[u8], noreply: bool) -> Option<Result<bool>> {
        let (op, args) = (Delete { noreply }, Args::keys(std::slice::from_ref(&key)));
        self.call_forgetting_one(&op, args)
    }

    /// A `noreply` `delete_one` as far as it goes without blocking (see `forget_start`): sent
    /// on an idle connection.
    pub fn delete_now(&self, key: &[u8]) -> Quick<bool> {
        let op = Delete { noreply: true };
        self.forget_now(&op, Args::keys(std::slice::from_ref(&key)))
    }

    /// `incr`/`decr`, pipelined: the new value, or `None` if the key does not exist (with
    /// `create`, a missing key is created at its initial value, which is returned).
    pub fn arith_multi(
        &self,
        incr: bool,
        keys: &[&[u8]],
        delta: u64,
        create: Option<Create>,
    ) -> Vec<Result<Option<u64>>> {
        Arith {
            incr,
            delta,
            create,
        }
        .call(self, Args::keys(keys))
    }

    /// One `incr`/`decr`: `arith_multi` of one key.
    pub fn arith_one(
        &self,
        incr: bool,
        key: &[u8],
        delta: u64,
        create: Option<Create>,
    ) -> Option<Result<Option<u64>>> {
        let op = Arith {
            incr,
            delta,
            create,
        };
        op.call_one(self, Args::keys(std::slice::from_ref(&key)))
    }

    /// One `touch`: `touch_multi` of one key.
    pub fn touch_one(&self, key: &[u8], exptime: u32, noreply: bool) -> Option<Result<bool>> {
        let op = Touch { exptime, noreply };
        self.call_forgetting_one(&op, Args::keys(std::slice::from_ref(&key)))
    }

    /// `touch`, pipelined: `true` if touched, `false` if not found.
    pub fn touch_multi(&self, keys: &[&[u8]], exptime: u32, noreply: bool) -> Vec<Result<bool>> {
        Touch { exptime, noreply }.call(self, Args::keys(keys))
    }

    /// Send `<verb> <key> <flags>` (no data block, no `q`) for each key and return each whole
    /// answer (see `op::meta`).
    pub fn meta_command(
        &self,
        verb: MetaVerb,
        keys: &[&[u8]],
        flags: &[u8],
    ) -> Vec<Result<MetaOutcome>> {
        let op = Meta {
            verb,
            flags: flags.into(),
        };
        op.call(self, Args::keys(keys))
    }

    /// `flush_all` on every server; one outcome per server.
    pub fn flush_all(&self, delay: u32) -> Vec<Result<()>> {
        Flush { delay }.call(self, Args::default())
    }

    /// `stats [args]` on every server; one outcome per server, in server order, with the
    /// server's address.
    pub fn stats(&self, args: &[u8]) -> Vec<(Address, Result<ServerStats>)> {
        let op = Stats { args: args.into() };
        op.call(self, Args::default())
    }
}
