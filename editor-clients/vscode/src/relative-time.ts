/** Times for people, shared by the webview and the extension (no Node, no DOM). */

/** "just now", "5 minutes ago", "yesterday"… */
export function relativeTime(iso: string, now = Date.now()): string {
  const seconds = Math.round((new Date(iso).getTime() - now) / 1000);
  if (Number.isNaN(seconds)) return "";
  if (Math.abs(seconds) < 45) return "just now";
  const format = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  const units: [Intl.RelativeTimeFormatUnit, number][] = [
    ["minute", 60],
    ["hour", 3600],
    ["day", 86400],
    ["week", 604800],
    ["month", 2629800],
    ["year", 31557600],
  ];
  let chosen = units[0];
  for (const unit of units) if (Math.abs(seconds) >= unit[1]) chosen = unit;
  return format.format(Math.round(seconds / chosen[1]), chosen[0]);
}
