//! `InMemoryStore` passes the store conformance suite; a store with only the
//! four required methods passes its cancel checks (rule 14), its journal
//! checks (rules 18 and 20: the journal lives in its one blob) and its
//! waits checks (rules 25-27: the mailbox lives in the blob too, and the
//! checks that need a due-index say so and stop) with the default
//! `cancel`, `save_fenced`, `delete_fenced`, `history`, `send_signal`,
//! `take_signal` and `signals`.

use fluxio_core::store::conformance::SharedMemory;

async fn harness() -> Option<SharedMemory> {
    Some(SharedMemory::default())
}

fluxio_core::store_conformance_tests!(harness);

/// The cancel checks on a four-method store. The rest of the suite expects
/// leases that expire and are kept by the store, which the in-process
/// default leases are not.
mod four_methods {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, PoisonError};

    use fluxio_core::store::conformance::{self, DynHarness, Harness};
    use fluxio_core::store::{Checkpoint, CheckpointStore};

    /// Checkpoints as bytes in a shared map: nothing but the four methods.
    #[derive(Debug, Clone, Default)]
    struct FourMethods(Arc<Mutex<HashMap<String, Vec<u8>>>>);

    impl FourMethods {
        fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }

    #[async_trait::async_trait]
    impl CheckpointStore for FourMethods {
        async fn save(&self, checkpoint: Checkpoint) -> fluxio::Result<()> {
            let bytes = checkpoint.to_bytes()?;
            self.map().insert(checkpoint.key(), bytes);
            Ok(())
        }
        async fn load(&self, run_id: &str) -> fluxio::Result<Option<Checkpoint>> {
            fluxio_core::store::check_run_id(run_id)?;
            let bytes = self.map().get(run_id).cloned();
            bytes
                .map(|b| Checkpoint::from_bytes(run_id, &b))
                .transpose()
        }
        async fn delete(&self, run_id: &str) -> fluxio::Result<()> {
            self.map().remove(run_id);
            Ok(())
        }
        async fn exists(&self, run_id: &str) -> fluxio::Result<bool> {
            Ok(self.map().contains_key(run_id))
        }
    }

    /// One map per namespace: two stores of one namespace share it.
    #[derive(Debug, Default)]
    struct FourMethodsHarness(Mutex<HashMap<String, FourMethods>>);

    #[async_trait::async_trait]
    impl Harness for FourMethodsHarness {
        type Store = FourMethods;

        async fn store(&self, ns: &str) -> FourMethods {
            let mut stores = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            stores.entry(ns.to_owned()).or_default().clone()
        }
    }

    macro_rules! checks {
        ($($check:ident),+ $(,)?) => {
            $(
                #[test]
                fn $check() {
                    conformance::block_on(conformance::$check(&FourMethodsHarness::default()));
                    conformance::block_on(conformance::$check(&DynHarness(
                        FourMethodsHarness::default(),
                    )));
                }
            )+
        };
    }

    checks!(
        rule14_cancel_of_an_unknown_run_is_checkpoint_not_found,
        rule14_cancel_marks_a_running_run_and_fences_its_owner,
        rule14_cancel_of_a_completed_run_is_run_finished,
        rule14_cancel_twice_is_run_finished_cancelled,
        rule14_a_failed_run_can_be_cancelled,
        rule14_a_run_whose_owner_is_gone_can_be_cancelled,
        rule14_delete_clears_a_cancel,
        rule14_a_plain_save_replaces_a_cancel,
        rule14_cancel_does_not_touch_another_key,
        rule14_a_cancel_racing_fenced_saves_wins_for_good,
        rule18_deltas_are_stored_and_loaded_whole,
        rule18_a_delta_without_its_predecessor_is_refused,
        rule18_a_checkpoint_sent_again_replaces_the_later_ones,
        rule20_history_is_cut_at_a_whole_checkpoint_and_deleted_with_the_run,
        rule20_a_plain_save_stores_the_journal_it_carries,
        rule21_a_store_without_listing_says_so,
        rule20_history_depth_keeps_between_n_and_n_plus_32_checkpoints,
        rule17_a_value_too_deep_is_refused_alike_on_every_store,
        rule14_a_cancelled_sync_run_starts_no_further_stage,
        rule24_a_cancelled_async_run_stops_at_its_first_refused_write,
        rule24_an_async_run_starts_no_stage_once_a_refusal_reached_it,
        rule25_a_sleeping_run_is_stored_with_its_wake_time_and_due_from_it,
        rule25_a_sleep_parks_the_run_until_a_worker_wakes_it_once,
        rule26_a_signal_is_stored_once_and_another_payload_conflicts,
        rule26_a_wait_is_decided_once_by_a_signal_or_its_deadline,
        rule26_racing_signals_and_deadlines_have_one_winner,
        rule26_a_waiting_run_continues_with_its_signal_or_its_timeout,
        rule27_a_waiting_run_is_due_when_signalled_or_past_its_deadline,
        rule27_racing_workers_continue_each_due_run_once,
        rule27_a_claim_takes_each_due_run_once,
        rule27_a_run_whose_claimant_died_is_woken_by_the_next_worker,
        rule27_busy_workers_wake_every_due_run_once_and_none_fails,
        rule27_a_recovery_time_is_kept_in_the_due_index,
        rule28_a_test_clock_fires_a_recovery_backoff,
        rule29_a_child_runs_once_and_its_result_goes_into_the_parent,
        rule29_a_failed_child_fails_the_parent_until_it_is_retried,
        rule29_cancelling_a_parent_cancels_its_open_child,
        rule29_child_runs_are_listed_by_parent,
        rule29_a_fan_out_runs_a_child_per_item_and_collects_their_results,
        rule31_a_queue_slot_is_a_lease_no_listing_shows,
        rule31_workers_start_queued_runs_within_the_limits,
        rule32_a_schedule_starts_one_run_per_tick_across_workers,
        rule32_overlap_and_catch_up_policies,
        rule30_a_run_past_its_deadline_stops_before_its_next_stage,
        rule30_a_sleep_past_the_deadline_wakes_the_run_to_fail_at_it,
        rule30_a_wait_is_left_at_the_runs_deadline_not_its_timeout,
        rule30_a_deadline_on_the_stores_clock_stops_a_slow_run,
        rule30_a_pause_stops_the_owner_before_its_next_stage,
        rule30_a_paused_wait_or_sleep_goes_back_to_it_when_unpaused,
        rule30_a_recovery_policy_can_pause_what_it_gives_up,
        rule30_a_pause_racing_fenced_saves_wins_until_unpaused,
    );
}
