//! A list of checks as one (`Limiter::check_all`): one script for the keys of one server
//! (one Cluster hash slot), the scripts of several slots sent at once, and what the
//! admitted ones took given back where another refused.

use std::sync::atomic::Ordering;

use super::failure::Failure;
use super::script::all::{uncounted, ListInvocation};
use super::{cluster, with_client_clock, RedisBackend, Topology};
use crate::backend::{Refund, Request};
use crate::decision::RawDecision;
use crate::BackendError;

impl RedisBackend {
    /// Checks `requests` as one, all or nothing; each answer says whether its own check
    /// would pass. The keys of one hash slot (every key, on one server or behind Sentinel)
    /// are one script, which writes only when every check passes, but for the lock-outs
    /// of refusing checks (`check_all.lua`); a key
    /// named twice goes to another script of the same slot. Several scripts are sent at
    /// once, each to its slot's master; when any refuses (or fails), what the others
    /// admitted is refunded, so the list counts nothing: never more admitted than a
    /// limit, but units held for about a round trip that a refused list did not use.
    pub(crate) async fn check_all(
        &self,
        requests: &[Request<'_>],
    ) -> Result<Vec<RawDecision>, BackendError> {
        let requests: Vec<Request<'_>> = match self.client_clock.load(Ordering::Relaxed) {
            true => {
                let first_us = with_client_clock(&requests[0]).now_us;
                requests
                    .iter()
                    .map(|r| Request {
                        now_us: r.now_us.or(first_us),
                        ..*r
                    })
                    .collect()
            }
            false => requests.to_vec(),
        };
        let groups = self.groups(&requests);
        if groups.len() == 1 {
            return self.check_group(&requests).await.map(|(_, raws)| raws);
        }
        // Counted so that a refund can give each check back.
        let grouped: Vec<Vec<Request<'_>>> = groups
            .iter()
            .map(|group| {
                group
                    .iter()
                    .map(|&i| Request {
                        refundable: requests[i].consume,
                        ..requests[i]
                    })
                    .collect()
            })
            .collect();
        let answers =
            futures_util::future::join_all(grouped.iter().map(|group| self.check_group(group)))
                .await;
        let admitted = answers.iter().all(|answer| matches!(answer, Ok((true, _))));
        if !admitted {
            let refunds = grouped
                .iter()
                .zip(&answers)
                .filter_map(|(group, answer)| match answer {
                    Ok((true, raws)) => Some(group.iter().zip(raws)),
                    _ => None,
                });
            let refunds = refunds
                .flatten()
                .filter(|(_, raw)| !raw.receipt.is_empty())
                .map(|(request, raw)| Refund {
                    key: request.key,
                    rules: request.rules,
                    receipt: raw.receipt,
                    now_us: None,
                })
                .collect::<Vec<_>>();
            let refunds = refunds.iter().map(|refund| self.refund(refund));
            for refunded in futures_util::future::join_all(refunds).await {
                if let Err(err) = refunded {
                    tracing::warn!(
                        target: "redis_ratelimit",
                        error = %err,
                        "a refused list of checks could not give back what another hash slot \
                         admitted; those units stay counted until their windows pass"
                    );
                }
            }
        }
        let mut raws: Vec<Option<RawDecision>> = vec![None; requests.len()];
        for (group, answer) in groups.iter().zip(answers) {
            let (group_admitted, group_raws) = answer?;
            for (&i, raw) in group.iter().zip(group_raws) {
                raws[i] = Some(match group_admitted && !admitted {
                    // Given back: it would pass, and took nothing.
                    true => uncounted(raw, &requests[i]),
                    false => raw,
                });
            }
        }
        Ok(raws
            .into_iter()
            .map(|raw| raw.expect("every check is in a group"))
            .collect())
    }

    /// The scripts a list of `requests` is sent as: the indices of each, every key once
    /// in each, and one hash slot per script on a Cluster.
    fn groups(&self, requests: &[Request<'_>]) -> Vec<Vec<usize>> {
        let slot_of = |key: &str| match self.topology() {
            Topology::Cluster(_) => cluster::slot(key.as_bytes()),
            _ => 0,
        };
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, request) in requests.iter().enumerate() {
            let slot = slot_of(request.key);
            let fits = |(at, group): &&mut (u16, Vec<usize>)| {
                *at == slot && group.iter().all(|&j| requests[j].key != request.key)
            };
            match groups.iter_mut().find(fits) {
                Some((_, group)) => group.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        groups.into_iter().map(|(_, group)| group).collect()
    }

    /// Runs `requests` (every key once, in one hash slot) as one script: whether they were
    /// admitted, and each one's answer. One request is a plain check.
    async fn check_group(
        &self,
        requests: &[Request<'_>],
    ) -> Result<(bool, Vec<RawDecision>), BackendError> {
        if let [request] = requests {
            let raw = self.check(request).await?;
            return Ok((raw.allowed, vec![raw]));
        }
        let key = requests[0].key;
        let deadline = self.deadline(self.config.timeout);
        let list = ListInvocation::new(requests);
        let eval = || Some(list.command(false));
        // A list is never sent again once it may have run: it would count its checks
        // again (only the sliding log's ids tell a re-run).
        let reply = self
            .send_script(key, &list.command(true), eval, false, deadline)
            .await
            .map_err(|failure| self.error(key, failure))?;
        list.decode(&reply).ok_or_else(|| {
            let what = format!("the rate-limit list script answered out of range: {reply:?}");
            self.error(key, Failure::Unexpected(what.into()))
        })
    }
}
