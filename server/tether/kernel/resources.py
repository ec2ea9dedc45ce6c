"""Resources attached to a prompt: a resource link whose URI a source of tools lists (an MCP
server's ``resources/list``) is read through that source, and its text goes into the prompt
right after the link, so the model reads it (and the session keeps it, as the user sent it).
A link no source lists is left as it is (the providers send it as a reference)."""

from __future__ import annotations

from tether.protocol import Content, ImageBlock, ResourceLinkBlock, TextBlock
from tether.tools.base import SourceResource, ToolExecutor


async def attach_resources(prompt: Content, tools: ToolExecutor) -> Content:
    """``prompt`` with the text of each resource a source lists after its link."""
    if isinstance(prompt, str) or not any(isinstance(b, ResourceLinkBlock) for b in prompt):
        return prompt
    blocks: list[TextBlock | ImageBlock | ResourceLinkBlock] = []
    attached = False
    for block in prompt:
        blocks.append(block)
        if isinstance(block, ResourceLinkBlock):
            resource = await tools.read_resource(block.uri)
            if resource is not None:
                blocks.append(TextBlock(text=_attachment(resource)))
                attached = True
    return list(blocks) if attached else prompt


def _attachment(resource: SourceResource) -> str:
    if resource.is_error:
        return f"[resource {resource.uri} could not be attached: {resource.text}]"
    return f"[resource {resource.uri}, from {resource.source}]\n{resource.text}"
