// A user stage that always fails (tests of failure handling).
import { RewardStageError, type RewardStage } from "../contract.ts";

export default (): RewardStage => ({
  score: async () => {
    throw new RewardStageError("the scorer is broken", false);
  },
});
