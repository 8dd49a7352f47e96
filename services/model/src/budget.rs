//! The budget tree: accounts with integer shares relative to their siblings.
//!
//! A leaf is an *allocation*: the thing jobs charge. Its fraction of the cluster is the product
//! of `share / sum(sibling shares)` along its path, kept as an exact rational so ranking can
//! compare without floats. The tree arrives as a `BudgetTreeSet` event and is validated here;
//! an invalid tree is rejected whole.

use std::collections::BTreeMap;

use fairshare_events::pb;

/// Separator between segments of an allocation path.
pub const PATH_SEPARATOR: char = '/';

/// Longest account name accepted.
pub const MAX_ACCOUNT_NAME_LEN: usize = 64;

/// Why a budget tree was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    /// The tree has no account at all.
    #[error("the budget tree has no accounts")]
    Empty,
    /// An account name is empty, too long, or uses characters outside `[A-Za-z0-9_.-]`.
    #[error(
        "account name {name:?} {} is not valid (1-64 characters of A-Z a-z 0-9 _ . -)",
        under(path)
    )]
    InvalidName {
        /// Path of the parent account ("" at the top).
        path: String,
        /// The offending name.
        name: String,
    },
    /// Two siblings share a name.
    #[error("account {path:?} is defined twice")]
    DuplicateAccount {
        /// Full path of the duplicate.
        path: String,
    },
    /// Shares are capped so that fraction products stay exact in 128-bit integers.
    #[error("account {path:?}: share {share} is over the limit of {limit}")]
    ShareTooLarge {
        /// Full path of the account.
        path: String,
        /// The share given.
        share: u64,
        /// The largest share accepted.
        limit: u64,
    },
    /// The shares of one group of siblings add up to more than [`MAX_SHARE`]: fractions are
    /// products of `share / total` over up to [`MAX_DEPTH`] levels, exact in 128 bits only while
    /// every total stays under the limit.
    #[error(
        "the accounts under {parent:?} have shares adding up to {total}, over the limit of \
         {limit} (shares are relative: scale them down)"
    )]
    SiblingSharesTooLarge {
        /// Path of their parent ("" at the top).
        parent: String,
        /// Their shares added up.
        total: u128,
        /// The largest total accepted.
        limit: u64,
    },
    /// An account's fraction of the cluster is finer than [`MAX_FRACTION_DEN`] parts: the
    /// share floors multiply it by the cluster's GPUs and by the hour's thousandths, which
    /// must stay exact in 128 bits.
    #[error(
        "account {path:?}: its fraction of the cluster is one in {den} parts (the product of \
         the share totals along its path), over the limit of {limit}: use smaller shares \
         (they are relative)"
    )]
    TooFine {
        /// Full path of the account.
        path: String,
        /// The denominator of its fraction (the share totals along its path, multiplied).
        den: u128,
        /// The largest denominator accepted.
        limit: u128,
    },
    /// The tree is deeper than ranking supports.
    #[error("account {path:?} is nested deeper than {limit} levels")]
    TooDeep {
        /// Full path of the account.
        path: String,
        /// The deepest level accepted.
        limit: usize,
    },
}

/// Where an account named in an error sits: "at the top level" or "under \"a/b\"".
fn under(parent: &str) -> String {
    if parent.is_empty() {
        "at the top level".to_owned()
    } else {
        format!("under {parent:?}")
    }
}

/// Largest share accepted, and largest total of one group of siblings' shares: with
/// [`MAX_DEPTH`] levels the exact fraction (at most `MAX_SHARE ^ MAX_DEPTH` over the same) fits
/// in 128 bits.
pub const MAX_SHARE: u64 = 1_000_000;
/// Deepest tree accepted (organisation -> program -> project -> team and a little more).
pub const MAX_DEPTH: usize = 6;
/// Finest fraction accepted (one in this many parts of the cluster): with a fraction this fine,
/// a floor of `fraction x GPUs x 1000` (the hourly floor's thousandths) on clusters of up to
/// four billion GPUs stays exact in 128 bits.
pub const MAX_FRACTION_DEN: u128 = u64::MAX as u128;

/// Index of an account in [`BudgetTree::accounts`].
pub type AccountId = usize;

/// One account of a validated tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountNode {
    /// Name relative to its parent.
    pub name: String,
    /// Full path from the root, segments joined by `/`.
    pub path: String,
    /// Share relative to siblings; 0 means no claim.
    pub share: u64,
    /// Parent account, `None` for top-level accounts.
    pub parent: Option<AccountId>,
    /// Children, sorted by name (the stable tie-break order).
    pub children: Vec<AccountId>,
    /// Depth from the top (top-level accounts are at 0).
    pub depth: usize,
}

impl AccountNode {
    /// Whether jobs can charge this account.
    pub fn is_allocation(&self) -> bool {
        self.children.is_empty()
    }
}

/// An exact fraction of the cluster: `num / den`, with `den > 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fraction {
    /// Numerator.
    pub num: u128,
    /// Denominator (never 0).
    pub den: u128,
}

/// A validated budget tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetTree {
    /// Every account; children always have larger ids than their parent.
    pub accounts: Vec<AccountNode>,
    /// Top-level accounts, sorted by name.
    pub roots: Vec<AccountId>,
    /// Allocation path -> account id, for every leaf.
    by_path: BTreeMap<String, AccountId>,
    /// [`Self::fraction`] of every account, by id, worked out once: ranking reads every
    /// allocation's in each cycle and pass.
    fractions: Vec<Fraction>,
}

impl BudgetTree {
    /// Validates the accounts of a `BudgetTreeSet` event.
    pub fn from_accounts(accounts: &[pb::Account]) -> Result<Self, BudgetError> {
        if accounts.is_empty() {
            return Err(BudgetError::Empty);
        }
        let mut tree = BudgetTree {
            accounts: Vec::new(),
            roots: Vec::new(),
            by_path: BTreeMap::new(),
            fractions: Vec::new(),
        };
        tree.roots = tree.add_level(accounts, None, "", 0)?;
        tree.fractions = tree.all_fractions();
        Ok(tree)
    }

    /// Refuses a tree with a fraction finer than [`MAX_FRACTION_DEN`] parts. Checked where a
    /// tree is written (`files::parse_budget`), not where the log is folded: a tree already in
    /// a log stays in force on replay, as it was when it was written.
    pub fn check_fine_enough(&self) -> Result<(), BudgetError> {
        match self
            .accounts
            .iter()
            .zip(&self.fractions)
            .find(|(_, f)| f.den > MAX_FRACTION_DEN)
        {
            Some((account, f)) => Err(BudgetError::TooFine {
                path: account.path.clone(),
                den: f.den,
                limit: MAX_FRACTION_DEN,
            }),
            None => Ok(()),
        }
    }

    fn add_level(
        &mut self,
        level: &[pb::Account],
        parent: Option<AccountId>,
        parent_path: &str,
        depth: usize,
    ) -> Result<Vec<AccountId>, BudgetError> {
        let mut sorted: Vec<&pb::Account> = level.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        // A single share over the limit is named below, account by account.
        let total: u128 = level.iter().map(|a| u128::from(a.share)).sum();
        if total > u128::from(MAX_SHARE) && level.iter().all(|a| a.share <= MAX_SHARE) {
            return Err(BudgetError::SiblingSharesTooLarge {
                parent: parent_path.to_owned(),
                total,
                limit: MAX_SHARE,
            });
        }
        let mut ids = Vec::with_capacity(sorted.len());
        for (i, account) in sorted.iter().enumerate() {
            if !is_valid_account_name(&account.name) {
                return Err(BudgetError::InvalidName {
                    path: parent_path.to_owned(),
                    name: account.name.clone(),
                });
            }
            let path = if parent_path.is_empty() {
                account.name.clone()
            } else {
                format!("{parent_path}{PATH_SEPARATOR}{}", account.name)
            };
            if i > 0 && sorted[i - 1].name == account.name {
                return Err(BudgetError::DuplicateAccount { path });
            }
            if account.share > MAX_SHARE {
                return Err(BudgetError::ShareTooLarge {
                    path,
                    share: account.share,
                    limit: MAX_SHARE,
                });
            }
            if depth >= MAX_DEPTH {
                return Err(BudgetError::TooDeep {
                    path,
                    limit: MAX_DEPTH,
                });
            }
            let id = self.accounts.len();
            self.accounts.push(AccountNode {
                name: account.name.clone(),
                path: path.clone(),
                share: account.share,
                parent,
                children: Vec::new(),
                depth,
            });
            let children = self.add_level(&account.children, Some(id), &path, depth + 1)?;
            if children.is_empty() {
                self.by_path.insert(path, id);
            }
            self.accounts[id].children = children;
            ids.push(id);
        }
        Ok(ids)
    }

    /// The allocation (leaf) at `path`, if there is one.
    pub fn allocation(&self, path: &str) -> Option<AccountId> {
        self.by_path.get(path).copied()
    }

    /// Whether `path` names an account that exists but has children (so cannot be charged).
    pub fn is_inner_account(&self, path: &str) -> bool {
        self.accounts
            .iter()
            .any(|a| a.path == path && !a.is_allocation())
    }

    /// Every allocation path, sorted.
    pub fn allocation_paths(&self) -> impl Iterator<Item = &str> {
        self.by_path.keys().map(String::as_str)
    }

    /// Siblings of `id` including itself.
    pub fn siblings(&self, id: AccountId) -> &[AccountId] {
        match self.accounts[id].parent {
            Some(p) => &self.accounts[p].children,
            None => &self.roots,
        }
    }

    /// [`Self::fraction`] of every account, by id.
    pub fn fractions(&self) -> &[Fraction] {
        &self.fractions
    }

    /// Every account's fraction in one pass from the roots down (parents have smaller ids
    /// than their children).
    fn all_fractions(&self) -> Vec<Fraction> {
        let mut out: Vec<Fraction> = Vec::with_capacity(self.accounts.len());
        for (id, account) in self.accounts.iter().enumerate() {
            let share = u128::from(account.share);
            let total: u128 = self
                .siblings(id)
                .iter()
                .map(|&s| u128::from(self.accounts[s].share))
                .sum();
            let above = account
                .parent
                .and_then(|p| out.get(p).copied())
                .unwrap_or(Fraction { num: 1, den: 1 });
            out.push(if share == 0 || total == 0 || above.num == 0 {
                Fraction { num: 0, den: 1 }
            } else {
                Fraction {
                    num: above.num * share,
                    den: above.den * total,
                }
            });
        }
        out
    }

    /// The exact fraction of the cluster that account `id` (leaf or inner) holds.
    pub fn fraction(&self, id: AccountId) -> Fraction {
        let mut num: u128 = 1;
        let mut den: u128 = 1;
        let mut cur = Some(id);
        while let Some(c) = cur {
            let share = u128::from(self.accounts[c].share);
            let total: u128 = self
                .siblings(c)
                .iter()
                .map(|&s| u128::from(self.accounts[s].share))
                .sum();
            if share == 0 || total == 0 {
                return Fraction { num: 0, den: 1 };
            }
            num *= share;
            den *= total;
            cur = self.accounts[c].parent;
        }
        Fraction { num, den }
    }
}

/// Whether `name` can be an account name (one path segment).
pub fn is_valid_account_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_ACCOUNT_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(name: &str, share: u64, children: Vec<pb::Account>) -> pb::Account {
        pb::Account {
            name: name.into(),
            share,
            children,
        }
    }

    fn sample() -> BudgetTree {
        BudgetTree::from_accounts(&[
            acc(
                "research",
                3,
                vec![acc("nlp", 1, vec![]), acc("vision", 3, vec![])],
            ),
            acc("infra", 1, vec![]),
            acc("guests", 0, vec![]),
        ])
        .unwrap()
    }

    #[test]
    fn a_tree_whose_fractions_are_too_fine_for_the_floors_is_refused() {
        // Four levels of share totals near a million: one in about 1e24 parts.
        let level = |child: Vec<pb::Account>| vec![acc("x", 999_999, child), acc("y", 1, vec![])];
        let deep = level(vec![
            acc(
                "x",
                999_999,
                vec![acc("x", 999_999, level(vec![])), acc("y", 1, vec![])],
            ),
            acc("y", 1, vec![]),
        ]);
        let tree = BudgetTree::from_accounts(&deep).unwrap();
        let err = tree.check_fine_enough().unwrap_err();
        assert!(matches!(err, BudgetError::TooFine { .. }), "{err}");
        assert!(err.to_string().contains("use smaller shares"), "{err}");
        // Three such levels are fine (one in 1e18).
        let three = level(vec![acc("x", 999_999, level(vec![])), acc("y", 1, vec![])]);
        let tree = BudgetTree::from_accounts(&three).unwrap();
        assert!(tree.check_fine_enough().is_ok());
    }

    #[test]
    fn fractions_are_products_of_sibling_ratios() {
        let t = sample();
        let f = |p: &str| t.fraction(t.allocation(p).unwrap());
        // research holds 3/4; vision holds 3/4 of that.
        assert_eq!(f("research/vision"), Fraction { num: 9, den: 16 });
        assert_eq!(f("research/nlp"), Fraction { num: 3, den: 16 });
        assert_eq!(f("infra"), Fraction { num: 1, den: 4 });
        assert_eq!(f("guests"), Fraction { num: 0, den: 1 });
    }

    #[test]
    fn all_fractions_at_once_match_each_one() {
        // A zero share above a leaf zeroes the whole subtree.
        let t = BudgetTree::from_accounts(&[
            acc(
                "research",
                3,
                vec![acc("nlp", 1, vec![]), acc("vision", 3, vec![])],
            ),
            acc("paused", 0, vec![acc("a", 1, vec![]), acc("b", 2, vec![])]),
            acc(
                "infra",
                1,
                vec![acc("ops", 0, vec![]), acc("ci", 5, vec![])],
            ),
        ])
        .unwrap();
        let all = t.fractions();
        assert_eq!(all.len(), t.accounts.len());
        for (id, f) in all.iter().enumerate() {
            assert_eq!(*f, t.fraction(id), "account {}", t.accounts[id].path);
        }
        assert_eq!(all[t.allocation("paused/b").unwrap()].num, 0);
        assert_eq!(
            all[t.allocation("infra/ci").unwrap()],
            Fraction { num: 5, den: 20 }
        );
    }

    #[test]
    fn only_leaves_are_allocations() {
        let t = sample();
        assert!(t.allocation("research").is_none());
        assert!(t.is_inner_account("research"));
        assert!(!t.is_inner_account("research/nlp"));
        assert_eq!(
            t.allocation_paths().collect::<Vec<_>>(),
            vec!["guests", "infra", "research/nlp", "research/vision"]
        );
    }

    #[test]
    fn an_invalid_name_is_placed_under_its_parent_or_at_the_top() {
        let top = BudgetTree::from_accounts(&[acc("bad name", 1, vec![])]).unwrap_err();
        assert_eq!(
            top.to_string(),
            "account name \"bad name\" at the top level is not valid (1-64 characters of A-Z a-z \
             0-9 _ . -)"
        );
        let nested =
            BudgetTree::from_accounts(&[acc("a", 1, vec![acc("vi deo", 1, vec![])])]).unwrap_err();
        assert!(
            nested
                .to_string()
                .starts_with("account name \"vi deo\" under \"a\" is not valid"),
            "{nested}"
        );
    }

    #[test]
    fn invalid_trees_are_refused_with_the_path() {
        assert_eq!(BudgetTree::from_accounts(&[]), Err(BudgetError::Empty));
        assert_eq!(
            BudgetTree::from_accounts(&[acc(
                "a",
                1,
                vec![acc("x", 1, vec![]), acc("x", 2, vec![])]
            )]),
            Err(BudgetError::DuplicateAccount { path: "a/x".into() })
        );
        assert_eq!(
            BudgetTree::from_accounts(&[acc("a", 1, vec![acc("b/c", 1, vec![])])]),
            Err(BudgetError::InvalidName {
                path: "a".into(),
                name: "b/c".into()
            })
        );
        assert!(matches!(
            BudgetTree::from_accounts(&[acc("a", MAX_SHARE + 1, vec![])]),
            Err(BudgetError::ShareTooLarge { .. })
        ));
        // Siblings each under the limit whose total is over it: six such levels would overflow
        // the exact fraction (2^132 wraps to a denominator of 0).
        let level = |children: Vec<pb::Account>| -> Vec<pb::Account> {
            let mut v: Vec<pb::Account> = (0..4)
                .map(|i| acc(&format!("s{i}"), 1_000_000, vec![]))
                .collect();
            v.push(acc("t", 194_304, children));
            v
        };
        let mut tree = level(vec![]);
        for _ in 0..5 {
            tree = level(tree);
        }
        assert_eq!(
            BudgetTree::from_accounts(&tree),
            Err(BudgetError::SiblingSharesTooLarge {
                parent: String::new(),
                total: 4_194_304,
                limit: MAX_SHARE,
            })
        );
        // At the share limit, three levels deep, the deepest fraction is exact and not zero;
        // six such levels make fractions too fine for the share floors' arithmetic.
        let at_limit = |children: Vec<pb::Account>| -> Vec<pb::Account> {
            vec![acc("a", 999_999, vec![]), acc("b", 1, children)]
        };
        let mut tree = at_limit(vec![]);
        for _ in 0..2 {
            tree = at_limit(tree);
        }
        let ok = BudgetTree::from_accounts(&tree).unwrap();
        let deepest = ok.allocation("b/b/b").unwrap();
        assert_eq!(
            ok.fraction(deepest),
            Fraction {
                num: 1,
                den: 1_000_000u128.pow(3)
            }
        );
        for _ in 0..3 {
            tree = at_limit(tree);
        }
        assert!(matches!(
            BudgetTree::from_accounts(&tree).map(|t| t.check_fine_enough()),
            Ok(Err(BudgetError::TooFine { .. }))
        ));
        let mut deep = acc("l6", 1, vec![]);
        for i in (0..6).rev() {
            deep = acc(&format!("l{i}"), 1, vec![deep]);
        }
        assert!(matches!(
            BudgetTree::from_accounts(&[deep]),
            Err(BudgetError::TooDeep { .. })
        ));
    }
}
