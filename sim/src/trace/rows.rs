//! Reading a job trace in the common CSV schema of `traces/README.md`: one row per job, columns
//! found by their header names. A bad row is an error naming the file, line and column.

use std::fmt;
use std::path::Path;

/// One job of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceJob {
    /// `job_id`.
    pub id: String,
    /// `submit_time_s`: seconds from the trace's start.
    pub submit: i64,
    /// `duration_s`: seconds the job runs once every pod runs.
    pub duration: i64,
    /// `num_pods`: the gang size.
    pub pods: u32,
    /// `gpus_per_pod` (0: a CPU-only job).
    pub gpus_per_pod: u32,
    /// `cpus_per_pod`, when the trace records it.
    pub cpus_per_pod: Option<u32>,
    /// `user` (empty when the trace does not record it).
    pub user: String,
}

/// Why a trace cannot be read: where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// The file as given.
    pub file: String,
    /// 1-based line (the header is line 1).
    pub line: u64,
    /// 1-based column (field) number, 0 when the problem is the whole line or file.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.column == 0 {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        } else {
            write!(f, "{}:{}:{}: {}", self.file, self.line, self.column, self.message)
        }
    }
}

impl std::error::Error for TraceError {}

/// Columns every row must have.
const REQUIRED: [&str; 5] = ["job_id", "submit_time_s", "duration_s", "num_pods", "gpus_per_pod"];

/// Reads a trace file.
pub fn load(path: &Path) -> Result<Vec<TraceJob>, TraceError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TraceError {
        file: file.clone(),
        line: 0,
        column: 0,
        message: format!("cannot read: {e}"),
    })?;
    parse(&file, &text)
}

/// Reads trace text; `file` names it in errors.
pub fn parse(file: &str, text: &str) -> Result<Vec<TraceJob>, TraceError> {
    let err = |line: u64, column: usize, message: String| TraceError { file: file.to_string(), line, column, message };
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(text.as_bytes());
    let header = reader.headers().map_err(|e| err(1, 0, format!("unreadable header: {e}")))?.clone();
    let index = |name: &str| header.iter().position(|h| h.trim() == name);
    let mut columns = [0usize; 5];
    for (slot, name) in columns.iter_mut().zip(REQUIRED) {
        *slot = index(name).ok_or_else(|| err(1, 0, format!("the header has no column `{name}`")))?;
    }
    let [id_col, submit_col, duration_col, pods_col, gpus_col] = columns;
    let (cpus_col, user_col) = (index("cpus_per_pod"), index("user"));
    let mut jobs = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            err(line, 0, format!("unreadable row: {e}"))
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let cell = |col: usize| -> Result<&str, TraceError> {
            record
                .get(col)
                .map(str::trim)
                .ok_or_else(|| err(line, col + 1, format!("missing column `{}`", &header[col])))
        };
        let number = |col: usize, min: i64| -> Result<i64, TraceError> {
            let text = cell(col)?;
            let value: i64 = text
                .parse()
                .map_err(|_| err(line, col + 1, format!("`{}` is {text:?}, not an integer", &header[col])))?;
            if value < min {
                return Err(err(line, col + 1, format!("`{}` is {value}; it must be at least {min}", &header[col])));
            }
            Ok(value)
        };
        let small = |col: usize, min: i64| -> Result<u32, TraceError> {
            let value = number(col, min)?;
            u32::try_from(value).map_err(|_| err(line, col + 1, format!("`{}` is {value}, too large", &header[col])))
        };
        let id = cell(id_col)?.to_string();
        if id.is_empty() {
            return Err(err(line, id_col + 1, "`job_id` is empty".into()));
        }
        let cpus_per_pod = match cpus_col.map(|c| (c, record.get(c).map(str::trim).unwrap_or(""))) {
            Some((c, text)) if !text.is_empty() => Some(small(c, 0)?),
            _ => None,
        };
        jobs.push(TraceJob {
            id,
            submit: number(submit_col, 0)?,
            duration: number(duration_col, 0)?,
            pods: small(pods_col, 1)?,
            gpus_per_pod: small(gpus_col, 0)?,
            cpus_per_pod,
            user: user_col.and_then(|c| record.get(c)).map(str::trim).unwrap_or("").to_string(),
        });
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "job_id,submit_time_s,duration_s,num_pods,gpus_per_pod,cpus_per_pod,user,queue,priority_or_qos,status\n";

    #[test]
    fn rows_read_with_optional_cells_empty() {
        let text = format!("{HEADER}a,0,84,1,1,1,u001,,,COMPLETED\nb,5,10,2,8,,,,,\n");
        let jobs = parse("t.csv", &text).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(
            jobs[1],
            TraceJob {
                id: "b".into(),
                submit: 5,
                duration: 10,
                pods: 2,
                gpus_per_pod: 8,
                cpus_per_pod: None,
                user: String::new()
            }
        );
    }

    #[test]
    fn bad_rows_name_file_line_and_column() {
        let cases = [
            (format!("{HEADER}a,0,-5,1,1,1,u,,,\n"), "t.csv:2:3: `duration_s` is -5; it must be at least 0"),
            (format!("{HEADER}a,0,5,1,x,1,u,,,\n"), "t.csv:2:5: `gpus_per_pod` is \"x\", not an integer"),
            (format!("{HEADER}a,0,5,1,1,1,u,,,\nb,3\n"), "t.csv:3:3: missing column `duration_s`"),
            (format!("{HEADER}a,0,5,0,1,1,u,,,\n"), "t.csv:2:4: `num_pods` is 0; it must be at least 1"),
            (
                "job_id,submit_time_s,num_pods,gpus_per_pod\n".to_string(),
                "t.csv:1: the header has no column `duration_s`",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse("t.csv", &text).unwrap_err().to_string(), want);
        }
    }
}
