//! A rank's checkpoints between training steps (`workflow.checkpoint` with `workflow.train`):
//! [`RankSaves`] answers the step loop's questions from the plan's schedule and writes the
//! rank's objects of each save through its engine's [`ObjectIo`], the same write path as a
//! checkpoint run's (single PUT or multipart, parts generated into the send buffers). A rank
//! with no object (DLIO's ranks ≥ tp·pp under ZeRO-0: all but rank 0 for unet3d) writes
//! nothing and goes on, as DLIO's do.

use crate::checkpoint::training::TrainCheckpointPlan;
use crate::content::Content;
use crate::rank::checkpoint::{ObjectIo, ObjectSpec};
use crate::rank::{RankError, TrainSaves};

/// One rank's saves.
pub struct RankSaves<'a> {
    plan: &'a TrainCheckpointPlan,
    rank: usize,
    /// The rank's checkpoint I/O, set up before the clock; `None` on a rank with no object.
    pub io: Option<Box<dyn ObjectIo + 'a>>,
}

impl std::fmt::Debug for RankSaves<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RankSaves")
            .field("rank", &self.rank)
            .field("writes", &self.io.is_some())
            .finish()
    }
}

impl<'a> RankSaves<'a> {
    pub fn new(
        plan: &'a TrainCheckpointPlan,
        rank: usize,
        io: Option<Box<dyn ObjectIo + 'a>>,
    ) -> RankSaves<'a> {
        RankSaves { plan, rank, io }
    }

    /// Whether rank `rank` writes anything per save.
    pub fn writes(plan: &TrainCheckpointPlan, rank: usize) -> bool {
        plan.objects.ranks.get(rank).is_some_and(|o| !o.is_empty()) && !plan.saves.is_empty()
    }

    /// The objects of rank `rank`'s save of epoch `epoch` after `step` steps, keys and bytes
    /// as planned, content from each key.
    pub fn objects(
        plan: &TrainCheckpointPlan,
        rank: usize,
        epoch: u32,
        step: u64,
    ) -> Vec<ObjectSpec> {
        let randomize = plan.objects.settings.randomize_tensor;
        plan.save_objects(rank, epoch, step)
            .into_iter()
            .map(|(key, bytes)| ObjectSpec {
                content: Content::of(&key, randomize).reduced(plan.objects.io.content),
                key,
                bytes,
            })
            .collect()
    }
}

impl TrainSaves for RankSaves<'_> {
    fn after_step(&self, step: u64, steps: u64) -> bool {
        self.plan.schedule.after_step(step, steps)
    }

    fn after_epoch(&self, epoch: u32) -> bool {
        self.plan.schedule.after_epoch(epoch)
    }

    fn save(&mut self, epoch: u32, step: u64) -> Result<(u32, u64), RankError> {
        let Some(io) = self.io.as_mut() else {
            return Ok((0, 0));
        };
        let (mut objects, mut bytes) = (0, 0);
        for object in RankSaves::objects(self.plan, self.rank, epoch, step) {
            io.put(&object)?;
            objects += 1;
            bytes += object.bytes;
        }
        Ok((objects, bytes))
    }
}
