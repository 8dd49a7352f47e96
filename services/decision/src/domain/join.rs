//! Merge joins of maps sorted by the same string key.
//!
//! Place in the flow: a cycle or a preemption pass walks one sorted map (registered nodes,
//! allocation paths) and needs the matching entries of others sorted the same way (loads and
//! maintenance windows by node, usage and running work by allocation). Walking them in
//! lockstep costs one short comparison per key instead of a search by name per key, and
//! names here share long prefixes, which makes those searches mostly string comparison.

use std::iter::Peekable;

/// Advances `it` past keys below `key` and takes the entry for `key`, if any. `it` must be
/// sorted by key and `key` must only grow between calls, so each map is walked once in all.
///
/// The next key is usually `key` itself (most nodes hold work, most allocations have usage),
/// so equality is tested first: one comparison per key in the common case.
pub(crate) fn take_matching<'s, K, V, I>(it: &mut Peekable<I>, key: &str) -> Option<&'s V>
where
    K: AsRef<str> + 's,
    V: 's,
    I: Iterator<Item = (&'s K, &'s V)>,
{
    loop {
        let (k, _) = it.peek()?;
        let k = (*k).as_ref();
        if k == key {
            return it.next().map(|(_, v)| v);
        }
        if k > key {
            return None;
        }
        // Below `key` and matched by no earlier key: an entry the walked map does not know
        // (the load of a node that is not registered, say). Skip it.
        it.next();
    }
}
