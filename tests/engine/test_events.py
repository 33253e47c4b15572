"""Event collection and GPUStack's message assembly (``_set_messages``)."""

from __future__ import annotations

from scheduler_core.events import Action, EventCollector, Level, list_message


def test_list_message_prefixes_each_line():
    """Rule: ListMessageBuilder renders '- line' joined by newlines."""
    assert list_message("one") == "- one"
    assert list_message(["a", "b"]) == "- a\n- b"
    assert list_message([]) == ""


def test_collector_drops_exact_repeats_only():
    """Rule: EventCollector dedups by level-action-message."""
    events = EventCollector()
    events.add(Level.INFO, Action.AUTO_SINGLE_GPU, "x")
    events.add(Level.INFO, Action.AUTO_SINGLE_GPU, "x")
    events.add(Level.WARNING, Action.AUTO_SINGLE_GPU, "x")
    assert [e.level for e in events.events] == [Level.INFO, Level.WARNING]


def test_last_event_per_action_wins_after_dedup():
    """Rule: the last *recorded* event per action wins; a repeat of an older message is not re-recorded."""
    events = EventCollector()
    events.add(Level.INFO, Action.DEFAULT, "- head")
    events.add(Level.INFO, Action.AUTO_SINGLE_GPU, "- first")
    events.add(Level.INFO, Action.AUTO_SINGLE_GPU, "- second")
    events.add(Level.INFO, Action.AUTO_SINGLE_GPU, "- first")  # duplicate: dropped
    assert events.assemble_message() == "- head\n- second"


def test_most_advanced_strategy_message_is_shown():
    """Rule: manual > multi-worker > single-worker multi-GPU > single GPU."""
    events = EventCollector()
    events.add(Level.INFO, Action.DEFAULT, "- head")
    events.add(Level.INFO, Action.AUTO_SINGLE_GPU, "- single")
    events.add(Level.INFO, Action.AUTO_SINGLE_WORKER_MULTI_GPU, "- multi")
    assert events.assemble_message() == "- head\n- multi"
    events.add(Level.INFO, Action.AUTO_MULTI_WORKER_MULTI_GPU, "- workers")
    assert events.assemble_message() == "- head\n- workers"


def test_no_strategy_message_leaves_trailing_newline():
    """Rule: default message + '\\n' even when no strategy recorded anything."""
    events = EventCollector()
    events.add(Level.INFO, Action.DEFAULT, "- head")
    assert events.assemble_message() == "- head\n"
