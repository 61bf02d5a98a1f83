#!/usr/bin/env python3
"""Call an A2A agent with the A2A project's own client (a2a-sdk), as `make demo EXAMPLE=examples/a2a.yaml` does:
fetch its card, stream the answer to one message, print what arrives.

    .venv/bin/python hack/a2a-call.py BASE_URL TOKEN "What should I check first?"
"""

from __future__ import annotations

import asyncio
import sys
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState


async def call(base: str, token: str, text: str) -> int:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=300) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        print(f"card: {card.name}: {card.description} (streaming: {card.capabilities.streaming}, "
              f"skills: {', '.join(skill.id for skill in card.skills)})")
        client = await ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create_from_url(base)
        message = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)])
        state = TaskState.TASK_STATE_UNSPECIFIED
        async for event in client.send_message(SendMessageRequest(message=message)):
            kind = event.WhichOneof("payload")
            if kind == "task":
                print(f"task {event.task.id}: {TaskState.Name(event.task.status.state)}")
            elif kind == "artifact_update":
                print("".join(part.text for part in event.artifact_update.artifact.parts), end="", flush=True)
            elif kind == "status_update":
                state = event.status_update.status.state
                print(f"\nstatus: {TaskState.Name(state)}")
    return 0 if state == TaskState.TASK_STATE_COMPLETED else 1


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(call(sys.argv[1], sys.argv[2], sys.argv[3])))
