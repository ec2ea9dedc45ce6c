"""An ACP prompt (content blocks) as tether's message content."""

from __future__ import annotations

from pydantic import ValidationError

from tether.acp.models import (
    AudioContent,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
)
from tether.protocol import ContentBlock as TetherBlock
from tether.protocol import ImageBlock, InvalidParams, ResourceLinkBlock, TextBlock


def prompt_content(blocks: list[ContentBlock]) -> list[TetherBlock]:
    """Text, images and resource links pass as they are; an embedded resource (a file the user
    attached) becomes a text block holding its text, tagged with its URI. Audio is refused: the
    agent does not declare it."""
    return [_block(index, block) for index, block in enumerate(blocks)]


def _block(index: int, block: ContentBlock) -> TetherBlock:
    if isinstance(block, TextContent):
        return TextBlock(text=block.text)
    if isinstance(block, ImageContent):
        return _image(index, block.mime_type, block.data)
    if isinstance(block, ResourceLink):
        return ResourceLinkBlock(uri=block.uri, name=block.name)
    if isinstance(block, AudioContent):
        raise InvalidParams.field(f"prompt.{index}", "audio prompts are not supported")
    return _embedded(index, block)


def _image(index: int, mime_type: str, data: str) -> ImageBlock:
    try:
        return ImageBlock(mime_type=mime_type, data=data)
    except ValidationError as exc:
        reason = exc.errors(include_url=False, include_input=False)[0]["msg"]
        raise InvalidParams.field(f"prompt.{index}", f"not a valid image: {reason}") from None


def _embedded(index: int, block: EmbeddedResource) -> TetherBlock:
    resource = block.resource
    if resource.text is not None:
        return TextBlock(text=f'<context ref="{resource.uri}">\n{resource.text}\n</context>')
    mime = resource.mime_type or ""
    if resource.blob is not None and mime.startswith("image/"):
        return _image(index, mime, resource.blob)
    shown = f"(binary content, {mime or 'unknown type'}, not shown)"
    return TextBlock(text=f'<context ref="{resource.uri}">{shown}</context>')
