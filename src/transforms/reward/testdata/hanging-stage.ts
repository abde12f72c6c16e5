// A user stage that never answers (tests of the reward timeout).
import type { RewardStage } from "../contract.ts";

export default (): RewardStage => ({ score: () => new Promise(() => {}) });
