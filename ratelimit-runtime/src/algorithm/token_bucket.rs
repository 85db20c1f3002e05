use super::Outcome;
use crate::Rule;

#[derive(Debug, Default)]
pub(crate) struct State {}

pub(crate) fn check(_state: &mut State, _rules: &[Rule], _now_us: u64, _consume: bool) -> Outcome {
    todo!()
}
