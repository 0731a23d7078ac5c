//! Writes the sample access log shipped as `examples/access.log.gz`:
//!
//! ```sh
//! cargo run --release -p tollgate-whatif --example sample_log -- examples/access.log.gz
//! ```
//!
//! Optional arguments after the file: the number of lines (default 90000)
//! and the seed (default 1). See `tollgate_whatif::sample` for what the
//! traffic is made of.

use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: sample_log FILE[.gz] [LINES] [SEED]")?;
    let lines: u64 = args.next().map_or(Ok(90_000), |a| a.parse())?;
    let seed: u64 = args.next().map_or(Ok(1), |a| a.parse())?;
    let file = std::io::BufWriter::new(std::fs::File::create(&path)?);
    if path.ends_with(".gz") {
        let mut gz = flate2::write::GzEncoder::new(file, flate2::Compression::best());
        tollgate_whatif::sample::generate(seed, lines, &mut gz)?;
        gz.finish()?.flush()?;
    } else {
        let mut file = file;
        tollgate_whatif::sample::generate(seed, lines, &mut file)?;
        file.flush()?;
    }
    Ok(())
}
