//! A plain table rendered two ways: aligned columns for the terminal and a
//! GitHub-flavoured Markdown table for `report.md`.

/// Rows of cells under a header; numeric-looking columns are right-aligned.
#[derive(Clone, Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column headers.
    pub fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Self {
        Table {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (missing cells are blank).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut cells: Vec<String> = cells.into_iter().map(Into::into).collect();
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// A column is numeric when it has a value and every non-blank cell
    /// starts like a number.
    fn numeric(&self, col: usize) -> bool {
        self.rows.iter().any(|r| !r[col].is_empty())
            && self.rows.iter().all(|r| {
                r[col].is_empty()
                    || r[col]
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_digit() || c == '+' || c == '-')
            })
    }

    /// Space-aligned columns, two spaces apart, header underlined.
    pub fn to_text(&self) -> String {
        let widths: Vec<usize> = (0..self.headers.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain([self.headers[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(c, cell)| {
                    let pad = widths[c] - cell.chars().count();
                    if self.numeric(c) {
                        format!("{}{cell}", " ".repeat(pad))
                    } else {
                        format!("{cell}{}", " ".repeat(pad))
                    }
                })
                .collect();
            parts.join("  ").trim_end().to_string()
        };
        let mut out = line(&self.headers);
        out.push('\n');
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        out.push_str(&rule.join("  "));
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }

    /// A Markdown table (pipes in cells escaped).
    pub fn to_markdown(&self) -> String {
        let esc = |s: &String| s.replace('|', "\\|");
        let mut out = format!(
            "| {} |\n",
            self.headers.iter().map(esc).collect::<Vec<_>>().join(" | ")
        );
        let aligns: Vec<&str> = (0..self.headers.len())
            .map(|c| if self.numeric(c) { "---:" } else { "---" })
            .collect();
        out.push_str(&format!("|{}|\n", aligns.join("|")));
        for r in &self.rows {
            out.push_str(&format!(
                "| {} |\n",
                r.iter().map(esc).collect::<Vec<_>>().join(" | ")
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_both_ways() {
        let mut t = Table::new(["name", "n"]);
        t.row(["a|b", "7"]);
        t.row(["long name", "12"]);
        assert_eq!(
            t.to_text(),
            "name        n\n---------  --\na|b         7\nlong name  12\n"
        );
        assert_eq!(
            t.to_markdown(),
            "| name | n |\n|---|---:|\n| a\\|b | 7 |\n| long name | 12 |\n"
        );
    }
}
