"""The delivery rules of shared conversations (issue 33, ``unicore.conversations``): pure, no Redis."""

from __future__ import annotations

import pytest
from unicore import conversations as rules
from unicore.conversations import Member, Post, Route, check_name, fit, mentions, route

WRITER, CRITIC, EDITOR = "writer", "critic", "team/editor"  # a namespaced id is mentioned by its name


def task(task_id: str, since: int = 0, left: bool = False) -> Member:
    return Member(kind="task", id=task_id, since=since, left=left)


MEMBERS = [Member(kind="user", id="ann"), task(WRITER), task(CRITIC), task(EDITOR)]


def person(text: str, seq: int = 10) -> Post:
    return Post(seq=seq, id=f"user:{seq}", kind="post", sender_kind="user", sender="ann", text=text, at=0.0)


def agent(sender: str, text: str, kind: rules.PostKind = "answer", seq: int = 10) -> Post:
    return Post(seq=seq, id=f"{kind}:{sender}:{seq}", kind=kind, sender_kind="task", sender=sender, text=text, at=0.0)


# ---- a person's post


def test_a_persons_post_without_mentions_reaches_every_task_and_starts_a_round():
    got = route(person("Ideas, anyone?"), MEMBERS, handoffs=3, limit=4)
    assert got == Route(to=(WRITER, CRITIC, EDITOR), new_round=True)  # people are no recipients
    assert not got.handoff and not got.limited


def test_a_persons_post_past_the_limit_still_reaches_them():
    assert route(person("again"), MEMBERS, handoffs=99, limit=2).to == (WRITER, CRITIC, EDITOR)


def test_a_persons_mention_reaches_only_the_mentioned():
    assert route(person("@critic, your view?"), MEMBERS, 0, 4).to == (CRITIC,)
    assert route(person("@editor and @writer"), MEMBERS, 0, 4).to == (WRITER, EDITOR)  # in the members' order
    assert route(person("@critic @critic"), MEMBERS, 0, 4).to == (CRITIC,)


def test_members_who_joined_after_the_post_or_left_get_nothing():
    members = [task(WRITER, since=9), task(CRITIC, since=10), task(EDITOR, since=3, left=True)]
    assert route(person("all of you", seq=10), members, 0, 4).to == (WRITER,)
    # mentioned by name, still nothing for those
    assert route(person("@critic @editor", seq=10), members, 0, 4).to == (WRITER,)
    assert route(person("@critic", seq=11), members, 0, 4).to == (CRITIC,)


def test_a_post_with_no_task_left_goes_to_no_one():
    assert route(person("hello"), [Member(kind="user", id="ann"), task(WRITER, left=True)], 0, 4).to == ()


# ---- an agent's post or answer


def test_an_agents_answer_goes_only_to_the_others_it_mentions():
    assert route(agent(WRITER, "Done."), MEMBERS, 0, 4) == Route()  # no mention: to no one, no hand-off
    got = route(agent(WRITER, "Draft ready, @critic?"), MEMBERS, 0, 4)
    assert got == Route(to=(CRITIC,), handoff=True)
    assert not got.new_round


def test_an_agent_never_gets_its_own_post():
    assert route(agent(WRITER, "Note to self, @writer."), MEMBERS, 0, 4) == Route()
    assert route(agent(WRITER, "@writer @critic", kind="post"), MEMBERS, 0, 4).to == (CRITIC,)


def test_an_agents_mention_of_a_task_that_left_or_a_stranger_is_no_hand_off():
    members = [task(WRITER), task(CRITIC, left=True)]
    assert route(agent(WRITER, "@critic, @nobody: thoughts?"), members, 0, 4) == Route()


def test_the_hand_off_limit_holds_agents_mentions_back():
    assert route(agent(WRITER, "@critic"), MEMBERS, handoffs=3, limit=4).handoff  # the 4th is allowed
    held = route(agent(WRITER, "@critic"), MEMBERS, handoffs=4, limit=4)
    assert held == Route(limited=True) and held.to == () and not held.handoff
    assert route(agent(WRITER, "@critic"), MEMBERS, handoffs=0, limit=0).limited  # limit 0: no hand-offs at all
    assert not route(agent(WRITER, "no mention"), MEMBERS, handoffs=4, limit=4).limited  # nothing held back


@pytest.mark.parametrize("kind", ["joined", "left", "note"])
def test_notes_joins_and_leaves_reach_no_one(kind):
    for sender_kind, sender in (("user", "ann"), ("task", WRITER), ("system", "")):
        item = Post(seq=10, id="x", kind=kind, sender_kind=sender_kind, sender=sender, text="@critic @writer", at=0)
        assert route(item, MEMBERS, 0, 4) == Route()


def test_a_post_by_the_conversation_itself_reaches_no_one():
    item = Post(seq=10, id="x", kind="post", sender_kind="system", sender="", text="@critic", at=0)
    assert route(item, MEMBERS, 0, 4) == Route()


# ---- mentions


def test_mentions_in_order_each_once():
    assert mentions("@writer, then @critic and @writer again; @critic.") == ["writer", "critic"]
    assert mentions("") == [] and mentions(None) == []  # type: ignore[arg-type]


def test_an_e_mail_address_or_a_path_is_no_mention():
    assert mentions("mail ann@writer.example or see /a/@critic and x@critic") == []
    assert mentions("(@critic) [@writer] '@editor'") == ["critic", "writer", "editor"]


def test_dotted_names_and_trailing_punctuation():
    assert mentions("@team.writer: done.") == ["team.writer"]
    assert mentions("thanks @critic. And @writer-") == ["critic", "writer"]  # a name ends with a letter or digit
    assert mentions("@a @-x @.y @Writer") == ["a"]  # names are lowercase DNS labels


def test_a_dotted_task_name_is_reachable_by_its_mention():
    members = [task("team.writer"), task(CRITIC)]
    assert route(agent(CRITIC, "over to @team.writer."), members, 0, 4).to == ("team.writer",)


# ---- fit, check_name


def test_fit_keeps_short_text_and_cuts_long_text_at_bytes_with_the_mark():
    assert fit("short", 100) == "short"
    exact = "x" * 100
    assert fit(exact, 100) == exact
    cut = fit("x" * 101, 100)
    assert cut.endswith(rules.CUT_MARK) and len(cut.encode()) <= 100 and cut.startswith("x" * 50)


def test_fit_never_splits_a_character():
    text = "é" * 1000  # two bytes each
    cut = fit(text, 101)
    assert cut.endswith(rules.CUT_MARK) and len(cut.encode()) <= 101
    body = cut[: -len(rules.CUT_MARK)]
    assert set(body) == {"é"} and len(body) == (101 - len(rules.CUT_MARK.encode())) // 2


def test_fit_default_is_the_post_limit():
    assert len(fit("y" * (rules.MAX_POST_BYTES + 1)).encode()) <= rules.MAX_POST_BYTES
    assert fit("y" * rules.MAX_POST_BYTES) == "y" * rules.MAX_POST_BYTES


@pytest.mark.parametrize("name", ["room", "a", "writers-room", "team.room", "r2", "a" * 63])
def test_check_name_accepts(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "Room", "BAD_NAME", "-room", "room-", "a" * 64, "room/x", "ro om", "room\n"])
def test_check_name_refuses_in_one_line(name):
    with pytest.raises(ValueError) as info:
        check_name(name)
    assert "not a conversation name" in str(info.value) and "\n" not in str(info.value).replace(repr(name), "")


# ---- what a task reads, and the note


def test_inbox_text_says_where_from_and_who():
    text = rules.inbox_text("room", agent(EDITOR, "@writer fix it", seq=7))
    assert text.startswith("[conversation room] final answer #7 from editor (an agent):\n@writer fix it\n")
    assert "from ann (a person)" in rules.inbox_text("room", person("hi"))


def test_the_limit_note_names_the_limit():
    assert "2 times" in rules.limit_note(2)


def test_active_tasks_leave_out_people_and_those_who_left():
    assert rules.active_tasks([*MEMBERS, task("gone", left=True)]) == [WRITER, CRITIC, EDITOR]
