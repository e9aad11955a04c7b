//! Inputs from a file (a work list): [`done_part`], what a once-job keeps of
//! the part of its file already done; [`pace`], when the rest will be done.

pub mod done_part;
pub mod pace;
