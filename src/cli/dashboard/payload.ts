import type { DeliveryView } from '../../store/contract.js';

/**
 * A delivery as the dashboard's API sends it: dates as ISO text, and the event's payload as indented JSON text, cut
 * at `MAX_PAYLOAD_CHARS` so a page of dead letters stays small whatever their events hold (`relaybus dead list
 * --json` prints them whole). The page writes the text with `textContent`, never as HTML.
 */

/** The longest payload text sent to the page, in characters. */
export const MAX_PAYLOAD_CHARS = 20_000;

/** The payload as the page shows it: indented JSON, cut with a note saying how much there is and where to see it. */
export function payloadText(payload: unknown): string {
  const text = JSON.stringify(payload, null, 2) ?? 'null';
  if (text.length <= MAX_PAYLOAD_CHARS) return text;
  return `${text.slice(0, MAX_PAYLOAD_CHARS)}\n… cut: ${text.length.toLocaleString('en-US')} characters in all (relaybus dead list --json prints it whole)`;
}

export interface DeliveryJson
  extends Omit<DeliveryView, 'availableAt' | 'createdAt' | 'updatedAt' | 'payload' | 'headers'> {
  readonly availableAt: string;
  readonly createdAt: string;
  readonly updatedAt: string;
  /** `payloadText` of the event's payload; null when the delivery was listed without it or no row holds it any more. */
  readonly payload: string | null;
  readonly headers: Readonly<Record<string, string>> | null;
}

export function deliveryJson(view: DeliveryView): DeliveryJson {
  const { payload, headers, ...rest } = view;
  const stored = headers !== undefined;
  return {
    ...rest,
    availableAt: view.availableAt.toISOString(),
    createdAt: view.createdAt.toISOString(),
    updatedAt: view.updatedAt.toISOString(),
    payload: stored ? payloadText(payload) : null,
    headers: headers ?? null,
  };
}
