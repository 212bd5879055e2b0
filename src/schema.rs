//! The dataset's schema and shape: column types, the columns of a file, rows per file and per
//! row group, and where object keys live. A leaf: the writer ([`crate::datagen`]), the settings,
//! the catalog and the virtual server all describe a dataset with these types.

use bytes::Bytes;
use serde::Serialize;

/// A column's element type. Widths are fixed, so layouts do not depend on values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// IEEE half precision (DLRM's `float16`): Parquet's FIXED_LEN_BYTE_ARRAY(2), logical Float16.
    Float16,
    Float32,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
}

impl Dtype {
    /// Every type, with DLIO's name for it.
    pub const ALL: [(Dtype, &'static str); 11] = [
        (Dtype::Float16, "float16"),
        (Dtype::Float32, "float32"),
        (Dtype::Float64, "float64"),
        (Dtype::Int8, "int8"),
        (Dtype::Int16, "int16"),
        (Dtype::Int32, "int32"),
        (Dtype::Int64, "int64"),
        (Dtype::Uint8, "uint8"),
        (Dtype::Uint16, "uint16"),
        (Dtype::Uint32, "uint32"),
        (Dtype::Uint64, "uint64"),
    ];

    /// Parses DLIO's dtype name.
    pub fn parse(name: &str) -> Option<Dtype> {
        Self::ALL.iter().find(|(_, n)| *n == name).map(|(d, _)| *d)
    }

    pub fn width_bytes(self) -> u64 {
        match self {
            Dtype::Int8 | Dtype::Uint8 => 1,
            Dtype::Float16 | Dtype::Int16 | Dtype::Uint16 => 2,
            Dtype::Float32 | Dtype::Int32 | Dtype::Uint32 => 4,
            Dtype::Float64 | Dtype::Int64 | Dtype::Uint64 => 8,
        }
    }
}

/// One column of the dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ColumnSpec {
    pub name: String,
    pub dtype: Dtype,
    /// Elements per row (the fixed list length); 1 means a plain scalar column.
    pub size: u64,
    /// Whether the reader fetches this column (DLIO's `read: false` skips it).
    pub read: bool,
}

impl ColumnSpec {
    pub fn row_bytes(&self) -> u64 {
        self.size * self.dtype.width_bytes()
    }
}

/// Everything needed to write (or lay out) the files of a dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DatasetSpec {
    /// `<data_folder>/train/`, the prefix every object key starts with.
    pub train_prefix: String,
    pub columns: Vec<ColumnSpec>,
    pub rows_per_file: u64,
    pub row_group_rows: u64,
    /// Seeds the file contents; file `i` gets its own stream derived from it.
    pub seed: u64,
}

impl DatasetSpec {
    /// Bytes of values in one row (DLIO's record length).
    pub fn record_bytes(&self) -> u64 {
        self.columns.iter().map(ColumnSpec::row_bytes).sum()
    }

    /// The object key of training file `index`: `<data_folder>/train/train_0007.parquet`.
    pub fn file_key(&self, index: usize) -> String {
        format!("{}train_{index:04}.parquet", self.train_prefix)
    }

    /// An upper estimate of one file's size: its values plus 1% for page headers and levels
    /// and 1 MiB for the footer and slack. (Exact sizes come from
    /// `datagen::probe_file`, at the cost of encoding a whole file.)
    pub fn file_bytes_estimate(&self) -> u64 {
        let values = self.record_bytes() * self.rows_per_file;
        values + values / 100 + (1 << 20)
    }
}

/// A file laid out but not stored: its size and its last bytes, footer included.
#[derive(Debug, Clone)]
pub struct ProbedFile {
    pub size_bytes: u64,
    /// The last bytes of the file, footer included (at least `datagen::PROBE_TAIL_BYTES`).
    pub tail: Bytes,
}
