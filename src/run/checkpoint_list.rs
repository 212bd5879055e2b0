//! The LISTs of a checkpoint run's folder, process 0's (what it found shared with the
//! others): DLIO's count of checkpoints before the restores ([`checkpoints_listed`]), and a
//! read-only run's check of every object it will read against the plan, at set-up, before
//! the clock ([`restore_checked`], the comparison in [`crate::checkpoint::restore`]).

use super::checkpoint_hosts::agreed;
use super::session::RunFailed;
use crate::checkpoint::CheckpointPlan;
use crate::checkpoint::restore::{check_step, too_few};
use crate::cluster::Cluster;
use crate::exit::UsageError;
use crate::s3::{self, Client};

/// The client process 0 lists with, on its own small runtime.
pub struct Lister<'a> {
    pub cluster: &'a Cluster,
    pub runtime: &'a tokio::runtime::Runtime,
    pub client: &'a Client,
    pub plan: &'a CheckpointPlan,
}

impl Lister<'_> {
    /// One LIST of the checkpoint folder, as the DLIO fork does before its reads: the
    /// checkpoints (`global_epoch…/` folders) found. A failed LIST fails the run.
    pub fn checkpoints_listed(&self) -> anyhow::Result<u32> {
        let found = (self.cluster.process() == 0).then(|| {
            self.runtime
                .block_on(self.count())
                .map_err(|e| format!("the LIST before the restores failed: {e}"))
        });
        self.cluster
            .share(found)?
            .map_err(|e| agreed(self.cluster, RunFailed(e)))
    }

    /// A read-only run's checkpoint, before the clock: DLIO's count, then one LIST of each
    /// checkpoint read, every object and its size compared with the plan. Anything missing
    /// or other, or a LIST that fails, is one line and exit 2.
    pub fn restore_checked(&self) -> anyhow::Result<()> {
        let verdict = (self.cluster.process() == 0).then(|| self.runtime.block_on(self.check()));
        self.cluster
            .share(verdict)?
            .map_err(|e| agreed(self.cluster, UsageError(e)))
    }

    async fn count(&self) -> Result<u32, s3::RequestError> {
        let prefix = self.plan.prefix();
        let folders = self.client.list_folders(&prefix).await?;
        Ok(folders
            .iter()
            .filter(|f| {
                f.strip_prefix(&prefix)
                    .is_some_and(|r| r.starts_with("global_epoch"))
            })
            .count() as u32)
    }

    async fn check(&self) -> Result<(), String> {
        let failed = |e: s3::RequestError| format!("the LIST before the restores failed: {e}");
        let reads = self.plan.settings.num_checkpoints_read;
        let found = self.count().await.map_err(failed)?;
        if found < reads {
            return Err(too_few(self.plan, reads, found));
        }
        let bucket = &self.client.target().bucket;
        for step in 1..=reads {
            let listed: Vec<(String, u64)> = self
                .client
                .list(&self.plan.step_prefix(step))
                .await
                .map_err(failed)?
                .into_iter()
                .map(|o| (o.key, o.size_bytes))
                .collect();
            check_step(self.plan, &format!("s3://{bucket}/"), step, &listed)?;
        }
        Ok(())
    }
}
