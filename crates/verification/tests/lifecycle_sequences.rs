//! Property test of lifecycle operation sequences: random interleavings of create, delete,
//! dispatch, a worker that claims and crashes, lost answers and time passing, run through the
//! real engine (`CommandIntake`, `Dispatcher`) over the in-memory store and the fake
//! KnowledgeFS on a manual clock (`tenantry_verification::sim::System`), checked against its
//! reference model after every step and once everything has drained. proptest shrinks a
//! failing sequence to a short one.

use proptest::prelude::*;
use tenantry_verification::sim::{Op, SPACES, System};

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0..SPACES).prop_map(Op::Create),
        1 => (0..SPACES).prop_map(Op::Delete),
        3 => Just(Op::Dispatch),
        1 => Just(Op::ClaimAndCrash),
        1 => (0u8..3).prop_map(Op::LoseAnswer),
        1 => prop::sample::select(vec![1u64, 10, 31, 700]).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn lifecycle_sequences_match_the_reference_model(ops in prop::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let result: Result<(), String> = runtime.block_on(async {
            let mut system = System::new(None);
            for op in &ops {
                system.apply(op).await?;
                system.check().await?;
            }
            system.drain().await?;
            system.check().await?;
            system.check_settled().await
        });
        prop_assert!(result.is_ok(), "{}", result.unwrap_err());
    }
}
