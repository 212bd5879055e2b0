//! A read-only run's checkpoint, checked against the plan before the clock starts.
//!
//! A restore (`num_checkpoints_write=0`) reads what an earlier run wrote. DLIO only counts the
//! checkpoint folders (`global_epoch1_step<k>/`) before its reads; a folder that is there but
//! not what this plan reads — a write stopped by Ctrl-C, an object deleted since, another
//! `--np`, another model — would fail mid-restore on the first object it lacks, or restore
//! other sizes than it reports. So the run lists each checkpoint it reads and compares every
//! object and its size with the plan ([`check_step`]); a difference is one line, saying which
//! (exit 2, nothing measured). Objects the plan does not read are left alone when every
//! planned one is there with its size.
//!
//! Pure: the listings are handed in (`run/checkpoint_list.rs` sends the LISTs).

use std::collections::{BTreeMap, BTreeSet};

use super::{CheckpointPlan, PlannedObject};

/// The line refusing a restore of `reads` checkpoints when the LIST of the checkpoint folder
/// finds `found` (`global_epoch1_step<k>/` folders).
pub fn too_few(plan: &CheckpointPlan, reads: u32, found: u32) -> String {
    format!(
        "checkpoint.num_checkpoints_read={reads} but the LIST of {} finds {found} checkpoint{} \
         (global_epoch1_step<k>/): write them first (a run with \
         checkpoint.num_checkpoints_write={reads}) or read fewer",
        plan.prefix(),
        if found == 1 { "" } else { "s" }
    )
}

/// Checks checkpoint `step` as `listed` (every object directly under its folder, as key and
/// size; keys elsewhere are ignored) against the plan: every planned object there with its
/// size, else one line naming the first object that differs, under `base` (`s3://bucket/`, or
/// a data directory `DIR/`), and why.
pub fn check_step(
    plan: &CheckpointPlan,
    base: &str,
    step: u32,
    listed: &[(String, u64)],
) -> Result<(), String> {
    let folder = plan.step_prefix(step);
    let url = |name: &str| format!("{base}{folder}{name}");
    let checkpoint = format!("the checkpoint under {base}{}", plan.prefix());
    let found: BTreeMap<&str, u64> = listed
        .iter()
        .filter_map(|(key, size)| Some((key.strip_prefix(folder.as_str())?, *size)))
        .filter(|(name, _)| !name.is_empty() && !name.contains('/'))
        .collect();
    let expected: Vec<&PlannedObject> = plan.ranks.iter().flatten().collect();
    if found.is_empty() {
        return Err(format!(
            "{base}{folder} is missing: {checkpoint} has no checkpoint {step}; write it \
             first (a run with checkpoint.num_checkpoints_write={step} or more) or read fewer"
        ));
    }
    let planned: BTreeSet<&str> = expected.iter().map(|o| o.name.as_str()).collect();
    let missing: Vec<&PlannedObject> = expected
        .iter()
        .copied()
        .filter(|o| !found.contains_key(o.name.as_str()))
        .collect();
    let resized: Vec<(&PlannedObject, u64)> = expected
        .iter()
        .filter_map(|o| {
            let size = *found.get(o.name.as_str())?;
            (size != o.bytes).then_some((*o, size))
        })
        .collect();
    let extra: Vec<&str> = found
        .keys()
        .copied()
        .filter(|name| !planned.contains(name))
        .collect();
    let is_model = |name: &str| name.ends_with("model_states.pt");
    let counts = || {
        let (found_models, planned_models) = (
            found.keys().filter(|n| is_model(n)).count(),
            planned.iter().filter(|n| is_model(n)).count(),
        );
        if found_models != planned_models {
            format!("found {found_models} model files, the plan has {planned_models}")
        } else {
            format!(
                "found {} objects, the plan has {}",
                found.len(),
                expected.len()
            )
        }
    };
    let another_np = || {
        format!(
            "{checkpoint} was written by another --np or model.parallelism than this plan's \
             --np {} ({}); restore with the write run's --np and model",
            plan.np,
            counts()
        )
    };
    match (missing.first(), resized.first(), extra.is_empty()) {
        (None, None, _) => Ok(()),
        // Only planned objects, each with its size, and some absent: a write that stopped.
        (Some(o), None, true) => Err(format!(
            "{} is missing: {checkpoint} is partial ({} of its {} objects in \
             global_epoch1_step{step}/: a write stopped early, or objects were deleted since); \
             write it again",
            url(&o.name),
            found.len(),
            expected.len()
        )),
        // Every planned name, other sizes: another model, or objects changed since.
        (None, Some((o, size)), true) => {
            let why = if resized.len() == expected.len() {
                format!(
                    "{checkpoint} was written for another model (model.* or its datatypes \
                     differ from the write run's); restore with the write run's workload"
                )
            } else {
                format!(
                    "{} of {} objects of {checkpoint}'s step {step} have other sizes: they \
                     were overwritten or cut short since; write the checkpoint again",
                    resized.len(),
                    expected.len()
                )
            };
            Err(format!(
                "{} is {size} bytes, the plan's is {} bytes: {why}",
                url(&o.name),
                o.bytes
            ))
        }
        (Some(o), _, _) => Err(format!("{} is missing: {}", url(&o.name), another_np())),
        (None, Some((o, size)), false) => Err(format!(
            "{} is {size} bytes, the plan's is {} bytes: {}",
            url(&o.name),
            o.bytes,
            another_np()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::MemoryLimits;
    use crate::checkpoint::{CheckpointOptions, CheckpointSettings, IoOptions};
    use crate::config::RawConfig;

    fn plan(np: u32, overrides: &[&str]) -> CheckpointPlan {
        let mut cfg = RawConfig::load("llama3_tiny").unwrap();
        for o in overrides {
            cfg.apply_override(o).unwrap();
        }
        let options = CheckpointOptions {
            np,
            hosts: 1,
            io: IoOptions::default(),
            memory_cap_bytes: None,
            server_bytes: 0,
        };
        let no_env = |_: &str| None;
        CheckpointPlan::resolve(
            &CheckpointSettings::resolve(&cfg).unwrap(),
            &options,
            &MemoryLimits::unlimited(),
            &no_env,
        )
        .unwrap()
    }

    /// What a write run of `plan` leaves for checkpoint `step`.
    fn written(plan: &CheckpointPlan, step: u32) -> Vec<(String, u64)> {
        plan.ranks
            .iter()
            .flatten()
            .map(|o| (plan.key(step, o), o.bytes))
            .collect()
    }

    #[test]
    fn what_the_plan_wrote_passes_with_other_keys_beside_it() {
        let p = plan(2, &[]);
        let mut listed = written(&p, 1);
        assert_eq!(check_step(&p, "s3://b/", 1, &listed), Ok(()));
        listed.push((format!("{}notes.txt", p.step_prefix(1)), 3));
        listed.push((format!("{}x", p.step_prefix(2)), 3));
        assert_eq!(check_step(&p, "s3://b/", 1, &listed), Ok(()));
    }

    #[test]
    fn an_empty_folder_and_a_missing_object_are_named() {
        let p = plan(2, &[]);
        let err = check_step(&p, "s3://b/", 2, &written(&p, 1)).unwrap_err();
        assert!(
            err.starts_with("s3://b/checkpoints/llama3_tiny/global_epoch1_step2/ is missing"),
            "{err}"
        );
        let mut listed = written(&p, 1);
        let (gone, _) = listed.remove(1);
        let err = check_step(&p, "s3://b/", 1, &listed).unwrap_err();
        assert!(
            err.starts_with(&format!("s3://b/{gone} is missing")),
            "{err}"
        );
        assert!(err.contains("partial (3 of its 4 objects"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn another_np_is_named_with_the_counts() {
        // Written with --np 2, restored with --np 4: ranks 2 and 3's objects are not there.
        let (two, four) = (plan(2, &[]), plan(4, &[]));
        let err = check_step(&four, "s3://b/", 1, &written(&two, 1)).unwrap_err();
        assert!(err.contains("is missing"), "{err}");
        assert!(
            err.contains("another --np") && err.contains("found 2 model files, the plan has 4"),
            "{err}"
        );
        // Written with --np 4, restored with --np 2: every name there, sizes of dp 4.
        let err = check_step(&two, "s3://b/", 1, &written(&four, 1)).unwrap_err();
        assert!(err.contains("bytes, the plan's is"), "{err}");
        assert!(
            err.contains("another --np") && err.contains("found 4 model files, the plan has 2"),
            "{err}"
        );
    }

    #[test]
    fn another_model_and_another_size_are_told_apart() {
        let p = plan(2, &[]);
        let bigger = plan(2, &["model.transformer.hidden_size=512"]);
        let err = check_step(&p, "s3://b/", 1, &written(&bigger, 1)).unwrap_err();
        assert!(err.contains("written for another model"), "{err}");
        let mut listed = written(&p, 1);
        listed[0].1 -= 1;
        let err = check_step(&p, "s3://b/", 1, &listed).unwrap_err();
        assert!(
            err.starts_with(&format!("s3://b/{} is", listed[0].0))
                && err.contains("1 of 4 objects"),
            "{err}"
        );
    }
}
