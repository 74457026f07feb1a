"""What a record shows a prompt: the observations that made an attempt fail survive compression."""

from __future__ import annotations

from ap_gym.memory import Record
from ap_gym.policies.records import format_record
from ap_gym.text import count_tokens, failed_action


def record(n_middle: int, success: bool = False) -> Record:
    steps = [{"action": "go to fridge 1", "observation": "You arrive at fridge 1. The fridge 1 is closed."},
             {"action": "take apple 1 from fridge 1", "observation": "Nothing happens."}]
    steps += [{"action": f"go to cabinet {i}",
               "observation": f"You arrive at cabinet {i}. On the cabinet {i}, you see a bowl 1, a cup 2, "
                              "a plate 3, a spatula 1 and a long list of other things besides." * 2}
              for i in range(n_middle)]
    steps += [{"action": "open fridge 1", "observation": "You open the fridge 1. In it you see an apple 1."}]
    return Record(1, "t", "cool", "put a cool apple in the microwave", steps, success, 0.0, 0, None)


def test_failed_feedback_and_final_observation_are_always_kept():
    for budget, middle in ((400, 5), (400, 40), (150, 40), (60, 40)):
        text = format_record(record(middle), budget)
        assert "> take apple 1 from fridge 1\n  Nothing happens." in text, (budget, middle)
        assert text.rstrip().endswith("In it you see an apple 1."), (budget, middle)
        assert text.startswith("Task: put a cool apple in the microwave\nOutcome: failure")


def test_compressed_to_the_budget_and_nothing_cut_when_it_fits():
    short = format_record(record(2), 2000)
    assert short.count("a long list of other things besides") == 4  # two middle steps, uncut
    for budget in (400, 200):
        assert count_tokens(format_record(record(12), budget)) <= budget
    long = format_record(record(60), 150)
    assert "more step(s)" in long and count_tokens(long) <= 150


def test_failed_action_reads_the_benchmarks_feedback():
    for text in ("Nothing happens.", "You can't see any such thing.", "No known action matches that input.",
                 "That's not a verb I recognise.", "Invalid action!"):
        assert failed_action(text), text
    for text in ("You arrive at fridge 1. The fridge 1 is closed.", "You open the fridge 1.", "Taken."):
        assert not failed_action(text), text
