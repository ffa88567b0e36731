use clap::Args;
#[derive(Args, Debug)]
pub struct BenchArgs {}
pub fn main(_a: BenchArgs) -> i32 {
    0
}
