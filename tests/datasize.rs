//! `ringload datasize` through the CLI: the reference's worked figures (B4), the commands it
//! prints, its refusals, and the free-space check of `--dir` against a real folder.

#![allow(clippy::unwrap_used, clippy::expect_used)]
mod common;

use common::{run, run_json};

/// unet3d and retinanet at 8 accelerators on one 512 GiB host: 28,000 and 8,511,284 files.
#[test]
fn the_reference_worked_figures() {
    let unet = run_json(&[
        "datasize",
        "unet3d_b200",
        "--np",
        "8",
        "--client-memory",
        "512GiB",
        "--json",
    ]);
    assert_eq!(unet["files_for_memory"], 18_750);
    assert_eq!(unet["files_for_steps"], 28_000);
    assert_eq!(unet["files"], 28_000);
    assert_eq!(unet["total_bytes"], 28_000u64 * 146_600_628);
    assert_eq!(
        unet["commands"][0],
        "ringload generate unet3d_b200 --files 28000 --output DIR"
    );
    // Above 10,000 files in one folder: mlpstorage's warning.
    assert!(
        unet["warnings"][0]
            .as_str()
            .unwrap()
            .contains("28,000 files in one folder")
    );
    let retina = run_json(&[
        "datasize",
        "retinanet_b200",
        "--np",
        "8",
        "--client-memory",
        "512GiB",
        "--json",
    ]);
    assert_eq!(retina["files_for_memory"], 8_511_284);
    assert_eq!(retina["files_for_steps"], 96_000);
    assert_eq!(retina["files"], 8_511_284);
    // The virtual server holds nothing per object; a run's catalog 8 B per object.
    assert_eq!(retina["catalog_bytes"], 8 * 8_511_284u64);
    // Two hosts double the memory term.
    let two = run_json(&[
        "datasize",
        "retinanet_b200",
        "--np",
        "8",
        "--client-memory",
        "512GiB",
        "--hosts",
        "2",
        "--json",
    ]);
    assert_eq!(two["files_for_memory"], 17_022_569);
    assert!(
        two["commands"][3].as_str().unwrap().contains("mpirun"),
        "{two}"
    );
    // Overrides size the files, and the commands that make them carry them.
    let small_records = run_json(&[
        "datasize",
        "retinanet_b200",
        "dataset.record_length_bytes=1000",
        "--np",
        "8",
        "--client-memory",
        "1GiB",
        "--json",
    ]);
    assert_eq!(small_records["files_for_memory"], 5 * (1u64 << 30) / 1000);
    assert_eq!(
        small_records["commands"][0],
        format!(
            "ringload generate retinanet_b200 dataset.record_length_bytes=1000 --files {} --output DIR",
            5 * (1u64 << 30) / 1000
        )
    );
    // The text report states both terms, the files and the commands.
    let (code, out, _) = run(&[
        "datasize",
        "unet3d_b200",
        "--np",
        "8",
        "--client-memory",
        "512GiB",
    ]);
    assert_eq!(code, 0);
    for want in [
        "= 18,750 files",
        "= 28,000 files",
        "files: 28,000",
        "3.73 TiB",
        "ringload serve unet3d_b200 --files 28000",
        "ringload run unet3d_b200 --files 28000 --np 8",
    ] {
        assert!(out.contains(want), "{want} not in {out}");
    }
}

#[test]
fn bad_input_is_one_line_naming_the_fix() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "datasize",
                "llama3_8b",
                "--np",
                "8",
                "--client-memory",
                "512GiB",
            ],
            "datasize sizes training datasets; llama3_8b is a checkpoint workload",
        ),
        (
            &[
                "datasize",
                "unet3d_b200",
                "--np",
                "0",
                "--client-memory",
                "512GiB",
            ],
            "--np",
        ),
        (
            &[
                "datasize",
                "unet3d_b200",
                "--np",
                "8",
                "--client-memory",
                "lots",
            ],
            "--client-memory",
        ),
        (
            &["datasize", "unet3d_b200", "--client-memory", "1GiB"],
            "--np",
        ),
        (
            &[
                "datasize",
                "unet3d_b200",
                "--np",
                "8",
                "--client-memory",
                "1GiB",
                "--files",
                "9",
            ],
            "drop --files",
        ),
        (
            &[
                "datasize",
                "unet3d_b200",
                "--np",
                "8",
                "--client-memory",
                "1GiB",
                "--dir",
                "/nonexistent/ringload-datasize",
            ],
            "--dir /nonexistent/ringload-datasize: cannot read its free space",
        ),
    ];
    for (args, want) in cases {
        let (code, _, err) = run(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {want} not in {err}");
    }
}

/// `--dir`: a real folder's free space (statvfs) against the dataset; exit 2 naming both when
/// it cannot hold it, after the figures.
#[test]
fn dir_free_space_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    // A small dataset: the answer agrees with the folder's free space, whatever it is.
    let small = run_json(&[
        "datasize",
        "retinanet_b200",
        "--np",
        "1",
        "--client-memory",
        "1MiB",
        "--dir",
        path,
        "--json",
    ]);
    let free = small["dir_free_bytes"].as_u64().unwrap();
    // The same folder's free space as df reads it (other writers may move it a little).
    let df = std::process::Command::new("df")
        .args(["--output=avail", "-B1", path])
        .output()
        .unwrap();
    let df: u64 = String::from_utf8_lossy(&df.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        free.abs_diff(df) <= df / 100 + (64 << 20),
        "datasize says {free} B free, df {df} B"
    );
    let total = small["total_bytes"].as_u64().unwrap();
    assert_eq!(small["dir_holds_it"], free >= total);
    // a million TiB of client memory: 5 EiB on the store, more than any folder holds.
    let (code, out, err) = run(&[
        "datasize",
        "retinanet_b200",
        "--np",
        "8",
        "--client-memory",
        "1000000TiB",
        "--dir",
        path,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(out.contains("it CANNOT hold the dataset"), "{out}");
    assert!(err.contains(&format!("--dir {path}:")), "{err}");
    assert!(err.contains("free, the dataset needs"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
