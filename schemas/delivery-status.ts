/** The states of a webhook delivery, in lifecycle order. No imports: the dashboard bundles it. */
export const DELIVERY_STATUSES = ['pending', 'retrying', 'succeeded', 'failed'] as const;
